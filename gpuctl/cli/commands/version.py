"""``gpuctl version``: the client's version, and with ``--show-cluster`` the API server's and the operator's."""

from typing import Annotated, Any

import typer

from gpuctl import __version__
from gpuctl.cli import render
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import OutputSpec
from gpuctl.cli.source import SourceSpec


@command(
    "version",
    summary="Print the version.",
    examples="""
  gpuctl version
  gpuctl version --show-cluster
  gpuctl version --show-cluster -o json""",
    listed=0,
    source=SourceFlags(),
    output=OutputFlags(sort=False),
)
def version_command(
    show_cluster: Annotated[
        bool,
        typer.Option("--show-cluster", help="Also ask the cluster: the API server's and the operator's versions."),
    ] = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Print the client version (with --show-cluster, the API server's and the operator's too: its Deployment, or
    an operator outside the cluster found by its leader Lease and webhook configurations, as doctor finds it)."""
    info: dict[str, Any] = {"clientVersion": {"gitVersion": __version__}}
    lines = [f"gpuctl {__version__}"]
    if show_cluster:
        cluster = cluster_versions(source)
        info |= cluster
        from gpuctl.core.serving import whereabouts_text

        lines += [f"server {cluster['serverVersion']['gitVersion']}", whereabouts_text(cluster["operator"])]
    render.emit_object(info, output, lambda: "\n".join(lines) + "\n")


def cluster_versions(spec: SourceSpec) -> dict[str, Any]:
    """The API server's version and where the operator runs, which version."""
    import time

    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import SourceError
    from gpuctl.core.doctor.records import parse_deployment, parse_lease, parse_webhook_configuration
    from gpuctl.core.naming import OPERATOR_NAME, OPERATOR_NAMESPACE
    from gpuctl.core.serving import whereabouts

    source = spec.live()
    server = source.server_version()

    def readable(read: Any, default: Any) -> Any:
        try:
            return read()
        except SourceError:  # a role that may not read it: what else is read still tells
            return default

    deployment = readable(lambda: source.get(kinds.DEPLOYMENT, OPERATOR_NAME, OPERATOR_NAMESPACE), None)
    lease = readable(lambda: source.get(kinds.LEASE, OPERATOR_NAME, OPERATOR_NAMESPACE), None)
    configs = readable(lambda: [*source.list(kinds.MUTATING_WEBHOOKS), *source.list(kinds.VALIDATING_WEBHOOKS)], [])
    entries = [e for c in configs for e in parse_webhook_configuration(c)]
    found = whereabouts(
        parse_deployment(deployment) if deployment else None,
        parse_lease(lease) if lease else None,
        entries,
        time.time(),
    )
    return {"serverVersion": {"gitVersion": server}, "operator": found}

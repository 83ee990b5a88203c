"""``gpuctl version``: the client's version, and with ``--show-cluster`` the API server's and the operator's."""

from typing import Annotated

import typer

from gpuctl import __version__
from gpuctl.cli.registry import SourceFlags, command
from gpuctl.cli.source import SourceSpec


@command(
    "version",
    summary="Print the version.",
    examples="""
  gpuctl version
  gpuctl version --show-cluster""",
    listed=0,
    source=SourceFlags(),
)
def version_command(
    show_cluster: Annotated[
        bool,
        typer.Option("--show-cluster", help="Also ask the cluster: the API server's and the operator's versions."),
    ] = False,
    *,
    source: SourceSpec,
) -> None:
    """Print the client version (with --show-cluster, the API server's and the operator's too)."""
    typer.echo(f"gpuctl {__version__}")
    if show_cluster:
        print_cluster_versions(source)


def print_cluster_versions(spec: SourceSpec) -> None:
    from gpuctl.cluster.kinds import DEPLOYMENT
    from gpuctl.core.naming import OPERATOR_NAME, OPERATOR_NAMESPACE

    source = spec.live()
    typer.echo(f"server {source.server_version()}")
    deployment = source.get(DEPLOYMENT, OPERATOR_NAME, OPERATOR_NAMESPACE)
    if deployment is None:
        typer.echo(f"operator: not installed (no deployment {OPERATOR_NAMESPACE}/{OPERATOR_NAME})")
        return
    labels = (deployment.get("metadata") or {}).get("labels") or {}
    typer.echo(f"operator {labels.get('app.kubernetes.io/version', 'unknown')}")

"""``gpuctl rbac admin``: the CLI's admin roles, scoped to this cluster's pools and to the namespaces an admin names."""

from typing import Annotated

import typer

from gpuctl.cli.errors import UsageError
from gpuctl.cli.registry import SourceFlags, command, group
from gpuctl.cli.source import SourceSpec

group(
    "rbac",
    summary="Generate least-privilege roles for gpuctl's users.",
    help="Generate the least-privilege roles of gpuctl's users from the cluster's pools.",
    examples="""
  gpuctl rbac admin --bind-group gpu-admins --dry-run-namespace team-a | kubectl apply -f -""",
    listed=190,
)


@command(
    "rbac admin",
    summary="Print the view, admin and dry-run roles for the pools.",
    examples="""
  gpuctl rbac admin --bind-group gpu-admins --dry-run-namespace team-a | kubectl apply -f -""",
    source=SourceFlags(),
)
def admin_command(
    dry_run_namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--dry-run-namespace",
            help="A namespace where the subjects may run server-side dry runs (repeatable).",
            show_default=False,
        ),
    ] = None,
    bind_user: Annotated[list[str] | None, typer.Option("--bind-user", help="A user to bind (repeatable).")] = None,
    bind_group: Annotated[list[str] | None, typer.Option("--bind-group", help="A group to bind (repeatable).")] = None,
    pool: Annotated[
        list[str] | None,
        typer.Option(
            "--pool", help="Only these pools' ClusterQueues (default: every InstanceType's).", show_default=False
        ),
    ] = None,
    *,
    source: SourceSpec,
) -> None:
    """Print gpuctl-view, gpuctl-admin (ClusterQueue patches limited to the pools' queues by resourceNames) and
    gpuctl-dry-run (Pod and Workload creates, bound per namespace), with bindings for the given users and groups.

    Regenerate it when pools come and go:
    `gpuctl rbac admin --bind-group gpu-admins --dry-run-namespace team-a | kubectl apply -f -`
    """
    import yaml

    from gpuctl.cluster import read
    from gpuctl.operator.manifests import cli_roles, dry_run_bindings

    for flag, names in (("--bind-user", bind_user), ("--bind-group", bind_group)):
        if any(not n.strip() for n in names or []):
            raise UsageError(f"{flag} '': an empty name binds nobody the API server can authenticate; give a name")
    subjects = [{"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"} for u in bind_user or []]
    subjects += [{"kind": "Group", "name": g, "apiGroup": "rbac.authorization.k8s.io"} for g in bind_group or []]
    if dry_run_namespace and not subjects:
        raise UsageError("--dry-run-namespace binds gpuctl-dry-run: name who with --bind-user or --bind-group")
    pools = list(pool or [])
    if not pools:
        pools = [t.name for t in read.instancetypes(source.open())]
    docs = cli_roles(pools)
    if subjects:
        for role in ("gpuctl-view", "gpuctl-admin"):
            docs.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": role},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": subjects,
                }
            )
        docs += dry_run_bindings(dry_run_namespace or [], subjects)
    typer.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)

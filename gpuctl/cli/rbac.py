"""``gpuctl rbac admin``: the CLI's admin roles, scoped to this cluster's pools and to the namespaces an admin names."""

from typing import Annotated

import typer

from gpuctl.cli.errors import UsageError, user_errors
from gpuctl.cli.options import ContextOption, KubeconfigOption, SnapshotOption, TimeoutOption, open_source

rbac_app = typer.Typer(
    help="Generate the least-privilege roles of gpuctl's users from the cluster's pools.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@rbac_app.command("admin")
@user_errors
def admin_command(
    dry_run_namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--dry-run-namespace",
            help="A namespace where the subjects may run server-side dry runs (repeatable).",
            show_default=False,
        ),
    ] = None,
    user: Annotated[list[str] | None, typer.Option("--user", help="A user to bind (repeatable).")] = None,
    group: Annotated[list[str] | None, typer.Option("--group", help="A group to bind (repeatable).")] = None,
    pool: Annotated[
        list[str] | None,
        typer.Option(
            "--pool", help="Only these pools' ClusterQueues (default: every InstanceType's).", show_default=False
        ),
    ] = None,
    snapshot: SnapshotOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """Print gpuctl-view, gpuctl-admin (ClusterQueue patches limited to the pools' queues by resourceNames) and
    gpuctl-dry-run (Pod and Workload creates, bound per namespace), with bindings for the given users and groups.

    Regenerate it when pools come and go: `gpuctl rbac admin --group gpu-admins --dry-run-namespace team-a | kubectl apply -f -`
    """
    import yaml

    from gpuctl.cluster import read
    from gpuctl.operator.manifests import cli_roles, dry_run_bindings

    subjects = [{"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"} for u in user or []]
    subjects += [{"kind": "Group", "name": g, "apiGroup": "rbac.authorization.k8s.io"} for g in group or []]
    if dry_run_namespace and not subjects:
        raise UsageError("--dry-run-namespace binds gpuctl-dry-run: name who with --user or --group")
    pools = list(pool or [])
    if not pools:
        pools = [t.name for t in read.instancetypes(open_source(snapshot, kubeconfig, context, request_timeout))]
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

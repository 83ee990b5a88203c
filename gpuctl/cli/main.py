"""The ``gpuctl`` command (also the kubectl plugin ``kubectl-gpuctl``).

Command modules are imported when their command runs, so ``gpuctl --help`` stays fast.
"""

import typer

from gpuctl import __version__

app = typer.Typer(
    name="gpuctl",
    help="See what a Kueue-shared GPU pool can still give, and why a workload waits.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuctl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """See what a Kueue-shared GPU pool can still give, and why a workload waits."""


@app.command("version")
def version_command(
    cluster: bool = typer.Option(
        False, "--cluster", help="Also ask the cluster: the API server's and the operator's versions."
    ),
    kubeconfig: str | None = typer.Option(
        None, "--kubeconfig", help="Path to the kubeconfig file.", show_default=False
    ),
    context: str | None = typer.Option(None, "--context", help="The kubeconfig context to use.", show_default=False),
) -> None:
    """Print the client version (with --cluster, the API server's and the operator's too)."""
    typer.echo(f"gpuctl {__version__}")
    if cluster:
        from gpuctl.cli.version import print_cluster_versions

        print_cluster_versions(kubeconfig, context)


def _register() -> None:
    from gpuctl.cli.completion import completion_command
    from gpuctl.cli.dump import dump_command
    from gpuctl.cli.explain import explain_app, workloads_command
    from gpuctl.cli.instances import instance_app
    from gpuctl.cli.instancetypes import instancetype_app
    from gpuctl.cli.partitions import partitions_command
    from gpuctl.cli.pools import drain_command, hold_command, resume_command
    from gpuctl.cli.rbac import rbac_app
    from gpuctl.cli.views import views_command
    from gpuctl.cli.webhook import webhook_app

    app.command("views")(views_command)
    app.command("partitions")(partitions_command)
    app.add_typer(explain_app, name="explain")
    app.command("workloads")(workloads_command)
    app.command("dump")(dump_command)
    app.command("completion")(completion_command)
    app.add_typer(webhook_app, name="webhook")
    app.add_typer(instancetype_app, name="instancetype")
    app.add_typer(instance_app, name="instance")
    app.command("hold")(hold_command)
    app.command("drain")(drain_command)
    app.command("resume")(resume_command)
    app.add_typer(rbac_app, name="rbac")


_register()


def run() -> None:
    from gpuctl.cli.completion import completion_requested, enable_completion

    if completion_requested():
        enable_completion()
    app()

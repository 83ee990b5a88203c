"""The ``gpuctl`` command (also the kubectl plugin ``kubectl-gpuctl``).

Command modules are imported when their command runs, so ``gpuctl --help`` stays fast.
"""

from __future__ import annotations

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
def version_command() -> None:
    """Print the client version."""
    typer.echo(f"gpuctl {__version__}")


def _register() -> None:
    from gpuctl.cli.explain import explain_app, workloads_command
    from gpuctl.cli.partitions import partitions_command
    from gpuctl.cli.views import views_command

    app.command("views")(views_command)
    app.command("partitions")(partitions_command)
    app.add_typer(explain_app, name="explain")
    app.command("workloads")(workloads_command)


_register()


def run() -> None:
    app()

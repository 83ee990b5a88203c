"""The ``gpuctl`` command (also the kubectl plugin ``kubectl-gpuctl``): the Typer app, run by ``gpuctl.cli.startup``
for everything its table does not answer.
"""

import sys
from typing import Any

import typer
from typer.core import TyperGroup

from gpuctl import __version__
from gpuctl.cli.options import SourceSpec, global_options, source_options


class _Group(TyperGroup):
    """The root command: a usage error is one line on stderr and exit 2, a group run without its subcommand prints
    its help on stdout and exits 0 (as kubectl does)."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        from typer._click import exceptions
        from typer.exceptions import Abort

        from gpuctl.cli.errors import EXIT_USAGE, usage_line

        try:
            value = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except exceptions.NoArgsIsHelpError as exc:
            sys.stdout.write(exc.ctx.get_help() + "\n")
            value = 0
        except exceptions.UsageError as exc:
            sys.stderr.write(f"error: {usage_line(exc)}\n")
            value = EXIT_USAGE
        except exceptions.ClickException as exc:
            exc.show()
            value = exc.exit_code
        except Abort:
            sys.stderr.write("Aborted.\n")
            value = 1
        if not standalone_mode:
            return value
        sys.exit(value if isinstance(value, int) else 0)


app = typer.Typer(
    name="gpuctl",
    cls=_Group,
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


def main(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """See what a Kueue-shared GPU pool can still give, and why a workload waits.

    kubectl's connection flags (--kubeconfig, --context, -n, ...) may come before the subcommand or after it.
    """


app.callback()(global_options(main))


def version_command(
    show_cluster: bool = typer.Option(
        False, "--show-cluster", help="Also ask the cluster: the API server's and the operator's versions."
    ),
    *,
    source: SourceSpec,
) -> None:
    """Print the client version (with --show-cluster, the API server's and the operator's too)."""
    typer.echo(f"gpuctl {__version__}")
    if show_cluster:
        from gpuctl.cli.version import print_cluster_versions

        print_cluster_versions(source)


app.command("version")(source_options()(version_command))


def _finish_tree(typer_app: typer.Typer, prefix: str = "") -> None:
    """Every command, sub-apps included: user errors answered with one line and their exit code (errors.handled), a
    one-sentence summary in the command list, and its examples after its help."""
    from gpuctl.cli.errors import handled
    from gpuctl.cli.help import SUMMARIES, epilog

    for command in typer_app.registered_commands:
        path = f"{prefix}{command.name}"
        if command.callback is not None:
            command.callback = handled(command.callback)
        command.short_help = SUMMARIES.get(path)
        command.epilog = epilog(path)
    for group in typer_app.registered_groups:
        path = f"{prefix}{group.name}"
        group.short_help = SUMMARIES.get(path)
        group.epilog = epilog(path)
        if group.typer_instance is not None:
            _finish_tree(group.typer_instance, f"{path} ")


def _register() -> None:
    from gpuctl.cli.completion import completion_command
    from gpuctl.cli.diff import diff_command
    from gpuctl.cli.doctor import doctor_command
    from gpuctl.cli.dump import dump_command
    from gpuctl.cli.explain import explain_app, workloads_command
    from gpuctl.cli.fragmentation import fragmentation_command
    from gpuctl.cli.instances import instance_app
    from gpuctl.cli.instancetypes import instancetype_app
    from gpuctl.cli.partitions import partitions_command
    from gpuctl.cli.plan import plan_app
    from gpuctl.cli.pools import drain_command, hold_command, resume_command
    from gpuctl.cli.queue import queue_command
    from gpuctl.cli.rbac import rbac_app
    from gpuctl.cli.simulate import simulate_command
    from gpuctl.cli.top import top_command
    from gpuctl.cli.views import views_command
    from gpuctl.cli.webhook import webhook_app

    app.command("views")(views_command)
    app.command("partitions")(partitions_command)
    app.add_typer(explain_app, name="explain")
    app.command("workloads")(workloads_command)
    app.command("simulate")(simulate_command)
    app.add_typer(plan_app, name="plan")
    app.command("fragmentation")(fragmentation_command)
    app.command("queue")(queue_command)
    app.command("diff")(diff_command)
    app.command("top")(top_command)
    app.command("doctor")(doctor_command)
    app.command("dump")(dump_command)
    app.command("completion")(completion_command)
    app.add_typer(webhook_app, name="webhook")
    app.add_typer(instancetype_app, name="instancetype")
    app.add_typer(instance_app, name="instance")
    app.command("hold")(hold_command)
    app.command("drain")(drain_command)
    app.command("resume")(resume_command)
    app.add_typer(rbac_app, name="rbac")
    _finish_tree(app)


_register()


def run() -> None:
    import os
    import sys

    from gpuctl.cli.completion import completion_requested, enable_completion
    from gpuctl.cli.startup import COMPLETE_VAR, PLUGIN_COMPLETE_VAR, prog_name

    if completion_requested():
        enable_completion()
    # Either shell protocol completes (the plugin's scripts name their own variable).
    complete_var = PLUGIN_COMPLETE_VAR if PLUGIN_COMPLETE_VAR in os.environ else COMPLETE_VAR
    app(prog_name=prog_name(sys.argv[0]), complete_var=complete_var)

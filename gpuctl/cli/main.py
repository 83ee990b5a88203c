"""The ``gpuctl`` command (also the kubectl plugin ``kubectl-gpuctl``): the root group, run by
:mod:`gpuctl.cli.startup` for everything its table does not answer.

The root knows no command by name: it finds ``gpuctl NAME`` in the module ``gpuctl.cli.commands.NAME`` when it runs
(:mod:`gpuctl.cli.registry`), and takes kubectl's connection flags before the subcommand.
"""

import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from gpuctl import __version__
from gpuctl.cli.options import global_options
from gpuctl.cli.registry import Commands


class _Group(TyperGroup):
    """The root command: its commands are built as they are called; a usage error is one line on stderr and exit 2,
    a group run without its subcommand prints its help on stdout and exits 0 (as kubectl does)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = Commands()

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        from gpuctl.cli.errors import usage_line
        from gpuctl.cli.vendored import ClickException, NoArgsIsHelpError, UsageError
        from gpuctl.core.errors import EXIT_USAGE

        try:
            value = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as exc:
            sys.stdout.write(exc.ctx.get_help() + "\n")
            value = 0
        except UsageError as exc:
            sys.stderr.write(f"error: {usage_line(exc)}\n")
            value = EXIT_USAGE
        except ClickException as exc:
            exc.show()
            value = exc.exit_code
        except typer.Abort:
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


def run() -> None:
    from gpuctl.cli.shells import COMPLETE_VAR, complete_var, prog_name

    var = complete_var(os.environ)
    if var is not None:  # a shell asks for completions: register the protocols its script speaks
        from gpuctl.cli.vendored import completion_init

        completion_init()
    app(prog_name=prog_name(sys.argv[0]), complete_var=var or COMPLETE_VAR)

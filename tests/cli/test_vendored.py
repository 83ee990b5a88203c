"""The names gpuctl takes from the click Typer vendors are the ones Typer itself raises and speaks: a Typer release
that moves one fails here, not in a user's terminal."""

from __future__ import annotations

import typer

from gpuctl.cli import vendored
from gpuctl.cli.main import app
from gpuctl.cli.shells import COMPLETE_VAR


def test_the_usage_errors_are_the_ones_typer_raises() -> None:
    assert issubclass(typer.BadParameter, vendored.UsageError)  # the same click as Typer's own errors
    assert issubclass(vendored.NoSuchOption, vendored.UsageError)
    assert issubclass(vendored.NoArgsIsHelpError, vendored.UsageError)
    assert issubclass(vendored.UsageError, vendored.ClickException)
    assert typer.Context.__mro__[1].__module__ == vendored.UsageError.__module__.replace("exceptions", "core")


def test_the_root_group_is_built_from_the_typer_app() -> None:
    root = vendored.get_command(app)
    assert root.name == "gpuctl"
    assert "views" in root.commands  # type: ignore[attr-defined]


def test_the_completion_script_names_the_program_and_its_variable() -> None:
    vendored.completion_init()  # registers the shells' protocols; idempotent
    script = vendored.get_completion_script(prog_name="gpuctl", complete_var=COMPLETE_VAR, shell="bash")
    assert COMPLETE_VAR in script and "gpuctl" in script and "complete_bash" in script

"""The few names gpuctl takes from the click that Typer vendors (``typer._click``), in one place.

Since 0.26 Typer ships click inside itself and re-exports only part of it (``typer.Context``, ``typer.Exit``,
``typer.Abort``, ``typer.BadParameter``). kubectl's conventions need a little more, which Typer has no public name for:

- the usage-error classes: a usage error is one line on stderr and exit 2 (click prints three), an unknown flag says
  which flag was meant, and a group run without its subcommand prints its help on stdout and exits 0;
- the shell-completion protocols Typer's completion scripts speak, and the scripts themselves (what its own
  ``--show-completion`` prints, for a program of another name and variable);
- the click command of a Typer app (``typer.main.get_command``): the root group builds a command only when it is
  called, and the man pages and the start-up table are generated from the tree of commands.

``pyproject.toml`` pins Typer to the versions these were read from (``>=0.26,<0.29``); ``tests/cli/test_vendored.py``
fails on a version that moves one.
"""

from __future__ import annotations

from typer._click.exceptions import ClickException, NoArgsIsHelpError, NoSuchOption, UsageError
from typer._completion_classes import completion_init
from typer._completion_shared import get_completion_script
from typer.main import get_command

__all__ = [
    "ClickException",
    "NoArgsIsHelpError",
    "NoSuchOption",
    "UsageError",
    "completion_init",
    "get_command",
    "get_completion_script",
]

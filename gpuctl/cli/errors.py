"""Errors a command reports: typed, each with its exit code, printed as one line on stderr — never a traceback.

Commands raise; one handler (:func:`handled`, wrapped around every command when the app is built) prints and exits.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_NO = 3


class CommandError(Exception):
    """An error a user can act on: its message is one line, its exit code says what kind."""

    exit_code = EXIT_RUNTIME


class UsageError(CommandError):
    """Flags or arguments that do not fit together (exit 2)."""

    exit_code = EXIT_USAGE


class RuntimeFailure(CommandError):
    """The command could not do its work: an unreachable API, an unreadable file, a conflict not resolved (exit 1)."""


class AnswerNo(CommandError):
    """The answer is "no" where a script needs it: a denied dry-run, a held workload with ``--exit-code`` (exit 3).

    Its message, when it has one, goes to stderr after the answer itself was printed."""

    exit_code = EXIT_NO


def exit_code_of(exc: BaseException) -> int | None:
    """The exit code for an error a user caused, or None for a bug (which keeps its traceback)."""
    from gpuctl.cluster.errors import SourceError
    from gpuctl.core.ledger import LedgerError
    from gpuctl.core.units import QuantityError

    if isinstance(exc, CommandError):
        return exc.exit_code
    if isinstance(exc, SourceError | LedgerError | QuantityError | OSError):
        return EXIT_RUNTIME
    return None


def handled(command: Callable[P, R]) -> Callable[P, R]:
    """Run a command, turning the errors a user can cause into one line on stderr and their exit code."""

    @functools.wraps(command)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        import typer

        try:
            return command(*args, **kwargs)
        except BrokenPipeError:
            # The reader went away (`| head`): stop quietly, as kubectl does.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(0) from None
        except Exception as exc:
            code = exit_code_of(exc)
            if code is None:
                raise
            message = str(exc)
            if message:
                sys.stderr.write(f"error: {message.splitlines()[0] if message else ''}\n")
            raise typer.Exit(code) from None

    return wrapped

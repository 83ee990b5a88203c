"""User errors become one line on stderr and an exit code; never a traceback."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer

from gpuctl.cli import render

P = ParamSpec("P")
R = TypeVar("R")

EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_NO = 3


class UsageError(Exception):
    """Flags or arguments that do not fit together."""


def user_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn the errors a user can cause into a one-line message and exit code 1 (2 for usage)."""

    @functools.wraps(command)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        from gpuctl.cluster.errors import SourceError
        from gpuctl.core.ledger import LedgerError
        from gpuctl.core.units import QuantityError

        try:
            return command(*args, **kwargs)
        except BrokenPipeError:
            # The reader went away (`| head`): stop quietly, as kubectl does.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(0) from None
        except UsageError as exc:
            render.error(str(exc))
            raise typer.Exit(EXIT_USAGE) from None
        except (SourceError, LedgerError, QuantityError, OSError) as exc:
            render.error(str(exc))
            raise typer.Exit(EXIT_RUNTIME) from None

    return wrapped

"""Errors a command reports: typed, each with its exit code, printed as one line on stderr — never a traceback.

Commands raise; one handler (:func:`handled`, wrapped around every command where it is declared) prints and exits.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

from gpuctl.core.errors import EXIT_NO, EXIT_RUNTIME, EXIT_USAGE, GpuctlError

P = ParamSpec("P")
R = TypeVar("R")


class CommandError(GpuctlError):
    """An error a command raises itself: its message is one line, its exit code says what kind."""


class UsageError(CommandError):
    """Flags or arguments that do not fit together (exit 2)."""

    exit_code = EXIT_USAGE


class RuntimeFailure(CommandError):
    """The command could not do its work: an unreachable API, an unreadable file, a conflict not resolved (exit 1)."""


class AnswerNo(CommandError):
    """The answer is "no" where a script needs it: a denied dry-run, a held workload with ``--exit-code`` (exit 3).

    Its message, when it has one, goes to stderr after the answer itself was printed."""

    exit_code = EXIT_NO


_COMMAND: ContextVar[str] = ContextVar("gpuctl_command", default="gpuctl")


def command_path() -> str:
    """The command being run, as the user typed it (``gpuctl views``), for messages."""
    return _COMMAND.get()


@contextlib.contextmanager
def running(path: str) -> Iterator[None]:
    """Name the command being run (its ``command_path``) while it runs."""
    token = _COMMAND.set(path)
    try:
        yield
    finally:
        _COMMAND.reset(token)


def exit_code_of(exc: BaseException) -> int | None:
    """The exit code for an error a user caused (ours carry it; a file the system could not read is 1), or None for
    a bug (which keeps its traceback)."""
    if isinstance(exc, GpuctlError):
        return exc.exit_code
    return EXIT_RUNTIME if isinstance(exc, OSError | UnicodeDecodeError) else None


def usage_line(exc: Any) -> str:
    """A usage error of the command line parser (a click ``UsageError``) as one line: what is wrong, and where the
    command's help is."""
    import difflib
    import re

    from gpuctl.cli.vendored import NoSuchOption

    ctx = getattr(exc, "ctx", None)
    where = f"; see '{ctx.command_path} -h'" if ctx is not None else ""
    if isinstance(exc, NoSuchOption):
        flags: list[str] = []
        if ctx is not None:
            flags = [o for p in ctx.command.get_params(ctx) for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
        close = difflib.get_close_matches(exc.option_name, flags, n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]}?)" if close else ""
        subcommands = sorted(getattr(ctx.command, "commands", None) or {}) if ctx is not None else []
        if ctx is not None and subcommands and not close:
            # A group takes no flags of its own: the flag belongs to one of its commands.
            return (
                f"{ctx.command_path} takes a command before its flags ({', '.join(subcommands)}): "
                f"e.g. {ctx.command_path} {subcommands[0]} {exc.option_name} ...{where}"
            )
        return f"unknown flag: {exc.option_name}{hint}{where}"
    message = str(exc.format_message()).strip()
    extra = re.match(r"Got unexpected extra arguments? ?\(?s?\)? \((.*)\)$", message)
    if extra:
        message = f"unexpected argument: {extra[1]}"
    elif message.startswith("No such command"):
        message = "unknown command" + message[len("No such command") :]
    elif message[:1].isupper() and not message[1:2].isupper():
        message = message[0].lower() + message[1:]
    return message.rstrip(".").replace("\n", " ") + where


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
            message = str(exc).splitlines()[0] if str(exc) else ""
            if isinstance(exc, UnicodeDecodeError):
                from gpuctl.core.errors import not_text

                message = not_text(exc)
            if message and code == EXIT_USAGE and "see '" not in message:
                message += f"; see '{command_path()} -h'"
            if message:
                sys.stderr.write(f"error: {message}\n")
            raise typer.Exit(code) from None

    return wrapped

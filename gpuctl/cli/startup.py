"""The entry points of ``gpuctl``, ``kubectl-gpuctl`` and ``kubectl_complete-gpuctl``: answers that are the same on
every run of a version — the help of every command, ``version``, and the completion of command names and flags — come
from a table generated from the commands' declarations (``startup_table``, written by ``make docs`` and checked fresh
by a test, as the man pages are), without importing Typer, whose import alone costs several times kubectl's whole
``--help``. Everything else, and anything the table cannot answer exactly (a terminal narrower than the help's 80
columns, quoted words, option values, names from the cluster), runs the Typer app, which stays the one definition of
the commands.

This module imports nothing but ``os``, ``sys`` and :mod:`gpuctl.cli.shells`: a test checks it in a fresh interpreter.
"""

from __future__ import annotations

import os
import sys

from gpuctl.cli.shells import COMPLETE_VAR, PLUGIN_COMPLETE_VAR, prog_name

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing itself is not imported at start-up
    from typing import Any

PROG = "{prog}"
"""Where the table's texts name the program (``gpuctl`` or ``kubectl gpuctl``): as long as ``gpuctl``, so the table's
lines wrap where that program's do."""
HELP_OPTIONS = ("-h", "--help")
HELP_WIDTH = 80
"""Help is wrapped to min(terminal width, 80): from 80 columns on it is the same text."""

Answer = tuple[str, str, int]
"""(stream "out" or "err", text, exit code)."""


def columns(env: dict[str, str] | os._Environ[str]) -> int:
    """The terminal width click would wrap help to (its COLUMNS, then the terminal, then 80)."""
    try:
        value = int(env.get("COLUMNS", "0"))
    except ValueError:
        value = 0
    if value > 0:
        return value
    try:
        return os.get_terminal_size(sys.__stdout__.fileno() if sys.__stdout__ else 1).columns
    except (OSError, ValueError, AttributeError):
        return HELP_WIDTH


def quick_answer(args: list[str], prog: str, env: dict[str, str] | os._Environ[str], width: int) -> Answer | None:
    """The answer from the table, or None when the app itself must run."""
    from gpuctl.cli.startup_table import TABLE

    if COMPLETE_VAR in env or PLUGIN_COMPLETE_VAR in env:
        mode = env.get(PLUGIN_COMPLETE_VAR) or env.get(COMPLETE_VAR)
        return _complete(TABLE, env) if mode == "complete_bash" else None
    if args in (["--version"], ["version"]):
        return ("out", f"gpuctl {TABLE['version']}\n", 0)
    if width < HELP_WIDTH:
        return None
    if args and args[-1] in HELP_OPTIONS:
        text = _text(TABLE, "help", prog, " ".join(args[:-1]))
        return None if text is None or any(a.startswith("-") for a in args[:-1]) else ("out", text, 0)
    bare = _text(TABLE, "bare", prog, " ".join(args))
    if bare is not None and not any(a.startswith("-") for a in args):
        stream, text, code = bare  # a group without its subcommand
        return (stream, text, code)
    return None


def _text(table: dict[str, Any], kind: str, prog: str, path: str) -> Any:
    """A help text (``kind`` "help") or a bare group's answer ("bare") as ``prog`` prints it, or None."""
    own = table[f"{kind}_as"].get(prog, {}).get(path)
    if own is not None:
        return own
    answer = table[kind].get(path)
    return None if answer is None else as_printed(answer, prog)


def as_printed(answer: Any, prog: str) -> Any:
    """A table entry — a help text, or a bare group's ``[stream, text, exit code]`` — as ``prog`` prints it."""
    if isinstance(answer, str):
        return answer.replace(PROG, prog)
    stream, text, code = answer
    return [stream, text.replace(PROG, prog), code]


def _complete(table: dict[str, Any], env: dict[str, str] | os._Environ[str]) -> Answer | None:
    """bash's protocol (COMP_WORDS, COMP_CWORD): command names and flags, as click completes them."""
    line = env.get("COMP_WORDS", "")
    if any(ch in line for ch in "\"'\\"):
        return None
    words = line.split()
    try:
        cword = int(env.get("COMP_CWORD", ""))
    except ValueError:
        return None
    if cword < 1 or cword > len(words):
        return None
    args, incomplete = words[1:cword], (words[cword] if cword < len(words) else "")
    resolved = _resolve(table["tree"], args)
    if resolved is None or "=" in incomplete:
        return None
    path, given = resolved
    node = table["tree"][path]
    if incomplete.startswith("-"):
        names = [
            name
            for option in node["options"]
            if option["multiple"] or not set(option["names"]) & given
            for name in option["names"]
            if name.startswith(incomplete)
        ]
    elif node["commands"] and (incomplete == "" or incomplete[0].isalnum()):
        names = [c for c in node["commands"] if c.startswith(incomplete)]
    else:
        return None  # an argument or an option's value: names from the cluster, the app's completion
    return ("out", "\n".join(names) + "\n", 0)


def _resolve(tree: dict[str, Any], args: list[str]) -> tuple[str, set[str]] | None:
    """The command the words so far lead to and the flags given to it; None where only parsing for real can tell (an
    unknown flag, an eager one such as --version that acts while parsing, ``--``, a flag still waiting for its value,
    a positional argument on a group)."""
    path = ""
    given: set[str] = set()
    expects_value = False
    for word in args:
        node = tree[path]
        if expects_value:
            expects_value = False
            continue
        if word == "--":
            return None
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            option = next((o for o in node["options"] if name in o["names"]), None)
            if option is None or option["eager"]:
                return None
            given.update(option["names"])
            expects_value = option["takes_value"] and "=" not in word
            continue
        child = f"{path} {word}".strip()
        if child in tree and word in node["commands"]:
            path, given = child, set()
        elif node["commands"]:
            return None
    return None if expects_value else (path, given)


def run() -> None:
    answer = quick_answer(sys.argv[1:], prog_name(sys.argv[0]), os.environ, columns(os.environ))
    if answer is None:
        from gpuctl.cli.main import run as run_app

        run_app()
        return
    stream, text, code = answer
    (sys.stdout if stream == "out" else sys.stderr).write(text)
    sys.stdout.flush()
    raise SystemExit(code)


def plugin_complete() -> None:
    """The ``kubectl_complete-gpuctl`` entry point ``pip install`` puts on PATH: kubectl runs it with
    ``__complete ARGS... WORD``; it completes in this process (no ``gpuctl`` on PATH needed), one candidate a line,
    then kubectl's directive (``:4``, no file completion)."""
    args = sys.argv[1:]
    if args[:1] == ["__complete"]:
        args = args[1:]
    words = ["gpuctl", *args]
    os.environ["COMP_WORDS"] = " ".join(words)
    os.environ["COMP_CWORD"] = str(len(words) - 1)
    os.environ[COMPLETE_VAR] = "complete_bash"
    try:  # noqa: SIM105 - contextlib is not imported at start-up
        run()
    except SystemExit:  # click ends a completion by exiting
        pass
    sys.stdout.write(":4\n")

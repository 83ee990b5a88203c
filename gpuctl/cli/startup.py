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

    Walked = tuple[str, set[str], dict[str, Any], int, dict[str, Any] | None]
    """(command path, its flags given, every flag's value, its arguments given, the option awaiting a value)."""

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
    """bash's protocol (COMP_WORDS, COMP_CWORD): command names and flags, as click completes them, and the names
    and values an argument or option completes from when :mod:`gpuctl.cli.namecache` holds them."""
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
    walked = _walk(table["tree"], args)
    if walked is None or "=" in incomplete:
        return None
    path, given, values, positionals, pending = walked
    node = table["tree"][path]
    if pending is not None:
        if incomplete.startswith("-"):
            return None  # click completes flags there, for an option still waiting for its value: the app's call
        names = _candidates(pending.get("complete"), values, env, incomplete)
    elif incomplete.startswith("-"):
        names = [
            name
            for option in node["options"]
            if option["multiple"] or not set(option["names"]) & given
            for name in option["names"]
            if name.startswith(incomplete)
        ]
    elif node["commands"]:
        if incomplete and not incomplete[0].isalnum():
            return None
        names = [c for c in node["commands"] if c.startswith(incomplete)]
    else:
        names = _candidates(_argument(node, positionals), values, env, incomplete)
    return None if names is None else ("out", "\n".join(names) + "\n", 0)


def _walk(tree: dict[str, Any], args: list[str]) -> Walked | None:
    """The command the words so far lead to, the flags given to it, every flag's value as the app reads it (the
    deepest command's own where it gives one, as a subcommand's value wins over its parent's), how many arguments
    it was given, and the option whose value is being typed. None where only parsing for real can tell (an unknown
    flag, an eager one such as --version that acts while parsing, ``--``, a positional argument on a group)."""
    path = ""
    given: set[str] = set()
    levels: list[dict[str, Any]] = [{}]
    positionals = 0
    pending: dict[str, Any] | None = None
    for word in args:
        node = tree[path]
        if pending is not None:
            _store(levels[-1], pending, word)
            pending = None
            continue
        if word == "--":
            return None
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            option = next((o for o in node["options"] if name in o["names"]), None)
            if option is None or option["eager"]:
                return None
            given.update(option["names"])
            if option["takes_value"]:
                if "=" in word:  # --flag=value; a short flag's value is what follows it (-n=x reads "=x")
                    _store(levels[-1], option, word[len(name) + 1 :] if word.startswith("--") else word[len(name) :])
                else:
                    pending = option
            else:
                _store(levels[-1], option, True)
            continue
        child = f"{path} {word}".strip()
        if child in tree and word in node["commands"]:
            path, given, positionals = child, set(), 0
            levels.append({})
        elif node["commands"]:
            return None
        else:
            positionals += 1
    values: dict[str, Any] = {}
    for level in levels:  # the deepest command's own value wins
        values.update({k: v for k, v in level.items() if v})
    return path, given, values, positionals, pending


def _store(level: dict[str, Any], option: dict[str, Any], value: Any) -> None:
    """A flag's value (of a repeated one, the last: the one a completion reads)."""
    if option.get("param"):
        level[option["param"]] = value


def _argument(node: dict[str, Any], given: int) -> Any:
    """What the argument being typed completes from: the first that still takes a value, as click picks it."""
    for argument in node.get("arguments", ()):
        if argument["nargs"] == -1:
            return argument.get("complete")
        if given < argument["nargs"]:
            return argument.get("complete")
        given -= argument["nargs"]
    return None


def _candidates(
    completes: Any, values: dict[str, Any], env: dict[str, str] | os._Environ[str], incomplete: str
) -> list[str] | None:
    """Candidates from a fixed list, or from the names :mod:`gpuctl.cli.namecache` holds for this source; None
    where the app must answer (nothing held, too old, or this is the process refreshing them)."""
    if isinstance(completes, list):
        return [c for c in completes if c.startswith(incomplete)]
    if not isinstance(completes, str):
        return None
    from gpuctl.cli import namecache

    if namecache.REFRESH_VAR in env:
        return None
    ident = namecache.identity(completes, values, env)
    if ident is None:
        return None
    text, exact = ident
    found = namecache.read(text, env)
    if found is None:
        return None
    names, age, refreshing = found
    if not exact:
        if age > namecache.MAX_AGE:
            return None
        if age > namecache.FRESH and refreshing > namecache.REFRESH_RETRY:
            namecache.mark_refreshing(text, env)
            namecache.refresh_in_background(env)
    return [n for n in names if n.startswith(incomplete)]


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

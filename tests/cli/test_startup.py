"""The start-up table answers exactly as the app would: help at full width, bare groups, version, and the completion
of command names and flags; whatever it cannot answer exactly goes to the app."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from typing import Any

import pytest

from gpuctl.cli.shells import COMPLETE_VAR
from gpuctl.cli.startup import quick_answer
from gpuctl.cli.startup_table import TABLE

TREE: dict[str, Any] = TABLE["tree"]


def app_completion(words: str, cword: int) -> str:
    from gpuctl.cli.main import app
    from gpuctl.cli.vendored import completion_init

    completion_init()
    env = {"COMP_WORDS": words, "COMP_CWORD": str(cword), COMPLETE_VAR: "complete_bash"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            app([], prog_name="gpuctl", complete_var=COMPLETE_VAR)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return out.getvalue()


def case(*words: str, must: bool) -> tuple[str, int, bool]:
    """COMP_WORDS and COMP_CWORD as bash sets them, the last word being the one completed ("" after a space), and
    whether the table must answer it itself (flags and command names; names and values are the app's)."""
    return " ".join(words), len(words) - 1, must


def completion_cases() -> list[tuple[str, int, bool]]:
    cases = []
    for path, node in TREE.items():
        head = ["gpuctl", *path.split()]
        group = bool(node["commands"])
        for prefix in ["", "-", "--", "--s", "--no", "-o", "--by", *(c[:2] for c in node["commands"])]:
            cases.append(case(*head, prefix, must=prefix.startswith("-") or group))
        # Flags already given, before and after the subcommand, with and without their values.
        for option in [o for o in node["options"] if not o["multiple"]][:4]:
            value = ["value"] if option["takes_value"] else []
            cases.append(case(*head, option["names"][0], *value, "--", must=not option["eager"]))
            cases.append(case(*head, option["names"][-1], *value, "", must=group and not option["eager"]))
        cases.append(case("gpuctl", "--context", "c", *path.split(), "-", must=True))
        cases.append(case("gpuctl", "-n=x", *path.split(), "--n", must=True))
    return cases


@pytest.mark.parametrize(("words", "cword", "must"), completion_cases())
def test_completion_from_the_table_is_the_apps(words: str, cword: int, must: bool) -> None:
    env = {"COMP_WORDS": words, "COMP_CWORD": str(cword), COMPLETE_VAR: "complete_bash"}
    fast = quick_answer([], "gpuctl", env, 80)
    assert fast is not None or not must, f"the table leaves {words!r} to the app"
    if fast is not None:
        stream, text, code = fast
        assert (stream, code) == ("out", 0)
        assert in_order(text) == in_order(app_completion(words, cword)), words


def in_order(text: str) -> tuple[list[str], set[str]]:
    """The candidates in order, but the help flags as a set: click orders those by a set (a per-process hash order)."""
    lines = text.splitlines()
    return [w for w in lines if w not in ("-h", "--help")], {w for w in lines if w in ("-h", "--help")}


def test_what_the_table_leaves_to_the_app() -> None:
    assert quick_answer(["views", "--help"], "gpuctl", {}, 79) is None  # narrower than the help
    assert quick_answer(["views", "--snapshot", "x", "--help"], "gpuctl", {}, 80) is None
    assert quick_answer(["views"], "gpuctl", {}, 80) is None
    for words, cword in (("gpuctl views --context ", 3), ("gpuctl explain workload ", 3), ("gpuctl 'views' -", 2)):
        env = {"COMP_WORDS": words, "COMP_CWORD": str(cword), COMPLETE_VAR: "complete_bash"}
        assert quick_answer([], "gpuctl", env, 80) is None, words
    assert quick_answer([], "gpuctl", {COMPLETE_VAR: "complete_zsh"}, 80) is None


def run_process(module: str, args: list[str], argv0: str = "gpuctl") -> tuple[str, str, int]:
    code = f"import sys; sys.argv[0] = {argv0!r}; from {module} import run; run()"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=60)
    return result.stdout, result.stderr, result.returncode


@pytest.mark.parametrize(
    ("args", "argv0"),
    [
        (["--help"], "gpuctl"),
        (["views", "-h"], "gpuctl"),
        (["instance", "stop", "--help"], "kubectl-gpuctl"),
        ([], "gpuctl"),
        (["webhook"], "kubectl-gpuctl"),
        (["version"], "gpuctl"),
        (["--version"], "gpuctl"),
    ],
)
def test_a_process_prints_what_the_app_prints(args: list[str], argv0: str) -> None:
    fast = run_process("gpuctl.cli.startup", args, argv0)
    assert fast == run_process("gpuctl.cli.main", args, argv0)
    env = {"COLUMNS": "80"}
    assert quick_answer(args, "kubectl gpuctl" if argv0 == "kubectl-gpuctl" else "gpuctl", env, 80) is not None


def test_start_up_imports_neither_typer_nor_typing() -> None:
    code = (
        "import sys; sys.argv = ['gpuctl', 'views', '--help']\n"
        "from gpuctl.cli import startup\n"
        "try:\n    startup.run()\nexcept SystemExit:\n    pass\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'typing', 'rich', 'kubernetes', 'yaml'))\n"
        "sys.stderr.write(repr(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.startswith("Usage: gpuctl views") and result.stderr == "[]", result.stderr

"""The README's console examples print what they say: each `$ gpuctl … --snapshot examples/snapshot` block is run and
its output compared line by line (a line `...` stands for any further lines)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.cli.test_kubectl_style import run

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```console\n(.*?)```", re.S)


def console_examples() -> list[tuple[str, list[str]]]:
    examples = []
    for block in BLOCK.findall((ROOT / "README.md").read_text()):
        command, *expected = block.rstrip("\n").split("\n")
        assert command.startswith("$ gpuctl "), command
        examples.append((command[2:], expected))
    return examples


def matches(expected: list[str], actual: list[str]) -> bool:
    pattern = "".join(r"(?:.*\n)*" if line.strip() == "..." else re.escape(line.rstrip()) + r"\n" for line in expected)
    return re.fullmatch(pattern, "".join(line.rstrip() + "\n" for line in actual)) is not None


def test_the_readme_shows_several_examples() -> None:
    assert len(console_examples()) >= 6


@pytest.mark.parametrize(("command", "expected"), console_examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_readme_example_prints_what_the_readme_shows(
    command: str, expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuctl.cli import clock
    from gpuctl.core.queueing import epoch_seconds
    from testbed.example_snapshot import EXAMPLE_NOW

    monkeypatch.chdir(ROOT)
    at = epoch_seconds(EXAMPLE_NOW)
    monkeypatch.setattr(clock, "now", lambda: at)  # the ages the README shows are the example's, on its day
    args = shlex.split(command)[1:]
    code, out, err = run(*args)
    assert code in (0, 3), err
    assert matches(expected, out.splitlines()), f"$ {command}\n{out}"


def test_ellipsis_matching() -> None:
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"]) and matches(["a", "..."], ["a"])
    assert not matches(["a", "d"], ["a", "b", "d"]) and not matches(["a"], ["a", "b"])

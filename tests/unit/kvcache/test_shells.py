"""Shells: the naming rule, and each family's options read up to a command mode, a script, or nothing."""

from __future__ import annotations

import pytest

from gpuctl.core.kvcache.shells import (
    BASH,
    BOURNE,
    CSH,
    FISH,
    KSH93,
    MKSH,
    POSIX_SH,
    YASH,
    ZSH,
    ShellGrammar,
    ShellLaunch,
    read_shell,
    shell_grammar,
)
from gpuctl.core.kvcache.shells import ShellMode as M


@pytest.mark.parametrize(
    ("name", "grammar"),
    [
        ("sh", POSIX_SH),
        ("bash", BASH),
        ("rbash", BASH),
        ("bash5", BASH),
        ("bash-5.2", BASH),
        ("bash-5.2.15", BASH),
        ("bash-static", BASH),
        ("dash", BOURNE),
        ("ash", BOURNE),
        ("posh", BOURNE),
        ("pdksh", BOURNE),
        ("oksh", BOURNE),
        ("zsh", ZSH),
        ("zsh-5.9", ZSH),
        ("ksh", KSH93),
        ("ksh93", KSH93),
        ("mksh", MKSH),
        ("mksh-static", MKSH),
        ("lksh", MKSH),
        ("csh", CSH),
        ("tcsh", CSH),
        ("fish", FISH),
        ("fish3", FISH),
        ("yash", YASH),
        ("python", None),
        ("python3", None),
        ("shellcheck", None),
        ("bashful", None),
        ("sha256sum", None),
        ("busybox", None),
        ("vllm", None),
        ("", None),
    ],
)
def test_shells_are_recognised_by_a_rule(name: str, grammar: ShellGrammar | None) -> None:
    assert shell_grammar(name) is grammar


def command(selector: str) -> ShellLaunch:
    return ShellLaunch(M.COMMAND, selector)


def script(index: int) -> ShellLaunch:
    return ShellLaunch(M.SCRIPT, script=index)


NOTHING = ShellLaunch(M.NOTHING)


@pytest.mark.parametrize(
    ("argv", "launch"),
    [
        (["bash", "-c", "x"], command("-c")),
        (["bash", "-lc", "x"], command("-lc")),
        (["bash", "+c", "x"], command("+c")),
        (["bash", "-s", "a"], command("-s")),
        (["bash", "+s", "a"], command("+s")),
        (["bash", "-o", "c", "run.sh"], script(3)),
        (["bash", "-oO", "errexit", "extglob", "run.sh"], script(4)),
        (["bash", "-O", "-c", "x"], command("-c")),
        (["bash", "-norc", "run.sh"], script(2)),
        (["sh", "-norc", "run.sh"], command("-norc")),
        (["bash", "--rcfile", "-c", "x"], command("-c")),
        (["bash", "--", "-c"], script(2)),
        (["bash", "-"], NOTHING),
        (["sh"], NOTHING),
        (["dash", "-e", "-u"], NOTHING),
        (["zsh", "--emulate", "sh", "run.sh"], script(3)),
        (["zsh", "--shin_stdin"], command("--shin_stdin")),
        (["zsh", "-o", "SHIN_STDIN"], command("-o SHIN_STDIN")),
        (["zsh", "+o", "shinstdin", "run.zsh"], script(3)),
        (["ksh93", "-R", "db", "run.ksh"], script(3)),
        (["mksh", "-T", "tty1", "run.sh"], script(3)),
        (["fish", "+c"], script(1)),
        (["fish", "-Cc", "run.fish"], script(2)),
        (["fish", "-C", "c", "run.fish"], script(3)),
        (["fish", "-ic", "x"], command("-ic")),
        (["fish", "--comm", "x"], command("--comm")),
        (["fish", "--command=x"], command("--command")),
        (["fish", "--init-command=true", "run.fish"], script(2)),
        (["yash", "--std"], command("--std")),
        (["yash", "--rcfile", "f", "run.sh"], script(3)),
        (["csh", "-b", "-c"], script(2)),
        (["tcsh", "-fc", "x"], command("-fc")),
        (["tcsh", "+c"], script(1)),
    ],
)
def test_shell_options_are_read_with_the_familys_grammar(argv: list[str], launch: ShellLaunch) -> None:
    grammar = shell_grammar(argv[0])
    assert grammar is not None
    assert read_shell(grammar, argv, 0) == launch


def test_the_shell_may_stand_anywhere_on_the_line() -> None:
    assert read_shell(BASH, ["tini", "--", "bash", "-e", "-c", "x"], 2) == command("-c")

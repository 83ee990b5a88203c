"""Transparent launchers: programs that run the command line after their own options unchanged (``tini --``,
``env A=1``, ``nice -n 5``, ``numactl --cpunodebind=0``…), so appended arguments still reach what they run.

Each launcher's options are read with its own grammar; an option the grammar does not know stops the walk, since the
program it runs can then no longer be placed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from gpuctl.core.compat import StrEnum


@dataclass(frozen=True, slots=True)
class LauncherSpec:
    """A transparent launcher's options: short flags, short options taking a value, and their long spellings."""

    flags: str = ""
    valued: str = ""
    long_flags: frozenset[str] = frozenset()
    long_valued: frozenset[str] = frozenset()
    split_short: str = ""
    """A short option whose value is a whole command line the launcher splits itself (``env -S``)."""
    split_long: str = ""
    dash_is_option: bool = False
    assignments: bool = False
    """``NAME=value`` operands before the program (``env``)."""
    operands: int = 0
    """Operands before the program: ``timeout DURATION``, ``taskset MASK``, ``chrt PRIORITY``."""
    numeric_options: bool = False
    """``-N`` (and ``--N``) is an option (``nice -10``)."""


LAUNCHERS: Final[Mapping[str, LauncherSpec]] = {
    "tini": LauncherSpec(flags="svwglh", valued="pe"),
    "tini-static": LauncherSpec(flags="svwglh", valued="pe"),
    "dumb-init": LauncherSpec(
        flags="cv",
        valued="r",
        long_flags=frozenset({"--single-child", "--verbose"}),
        long_valued=frozenset({"--rewrite"}),
    ),
    "env": LauncherSpec(
        flags="i0v",
        valued="uC",
        long_flags=frozenset(
            {"--ignore-environment", "--null", "--debug", "--ignore-signal", "--default-signal", "--block-signal"}
        ),
        long_valued=frozenset({"--unset", "--chdir"}),
        split_short="S",
        split_long="--split-string",
        dash_is_option=True,
        assignments=True,
    ),
    "exec": LauncherSpec(),
    "nice": LauncherSpec(valued="n", long_valued=frozenset({"--adjustment"}), numeric_options=True),
    "nohup": LauncherSpec(),
    "setsid": LauncherSpec(flags="cfw", long_flags=frozenset({"--ctty", "--fork", "--wait"})),
    "stdbuf": LauncherSpec(valued="ioe", long_valued=frozenset({"--input", "--output", "--error"})),
    "timeout": LauncherSpec(
        flags="fpv",
        valued="ks",
        long_flags=frozenset({"--foreground", "--preserve-status", "--verbose"}),
        long_valued=frozenset({"--kill-after", "--signal"}),
        operands=1,
    ),
    "taskset": LauncherSpec(flags="ac", long_flags=frozenset({"--all-tasks", "--cpu-list"}), operands=1),
    "numactl": LauncherSpec(
        flags="alb",
        valued="ipmcNCPw",
        long_flags=frozenset({"--all", "--localalloc", "--balancing"}),
        long_valued=frozenset(
            {
                "--interleave",
                "--preferred",
                "--preferred-many",
                "--membind",
                "--cpubind",
                "--cpunodebind",
                "--physcpubind",
                "--weighted-interleave",
            }
        ),
    ),
    "chrt": LauncherSpec(
        flags="abdfioRrv",
        valued="TPD",
        long_flags=frozenset(
            {
                "--all-tasks",
                "--batch",
                "--deadline",
                "--fifo",
                "--idle",
                "--other",
                "--reset-on-fork",
                "--rr",
                "--verbose",
            }
        ),
        long_valued=frozenset({"--sched-runtime", "--sched-period", "--sched-deadline"}),
        operands=1,
    ),
    "ionice": LauncherSpec(
        flags="t",
        valued="cn",
        long_flags=frozenset({"--ignore"}),
        long_valued=frozenset({"--class", "--classdata"}),
    ),
}
"""The transparent launchers by base name. Options that make one act on another process instead of running a
command (``taskset -p``, ``chrt -p``, ``ionice -p``, ``numactl --show``) are not in its grammar."""

MULTI_CALL: Final = frozenset({"busybox", "toybox"})
"""Multi-call binaries: the applet named after them is the program (``busybox sh``)."""

_NUMERIC_OPTION = re.compile(r"--?\d+")


class LauncherStop(StrEnum):
    SPLIT_STRING = "split-string"
    """An option whose value is a whole command line the launcher splits itself."""
    UNKNOWN_OPTION = "unknown-option"


@dataclass(frozen=True, slots=True)
class Stopped:
    """Why the walk cannot place the program a launcher runs."""

    stop: LauncherStop
    option: str
    """The option as the refusal names it (``-S``, ``--split-string``, or the unknown option)."""


def _short_cluster(spec: LauncherSpec, token: str) -> int | Stopped:
    """How many argv entries a ``-xyz`` cluster occupies (1 or 2), or why it stops the walk."""
    for pos, char in enumerate(token[1:], 1):
        if spec.split_short and char == spec.split_short:
            return Stopped(LauncherStop.SPLIT_STRING, f"-{spec.split_short}")
        if char in spec.valued:
            return 1 if pos < len(token) - 1 else 2
        if char not in spec.flags:
            return Stopped(LauncherStop.UNKNOWN_OPTION, token)
    return 1


def _long_option(spec: LauncherSpec, token: str) -> int | Stopped:
    name, eq, _ = token.partition("=")
    if spec.split_long and name == spec.split_long:
        return Stopped(LauncherStop.SPLIT_STRING, spec.split_long)
    if name in spec.long_valued:
        return 1 if eq else 2
    if name in spec.long_flags:
        return 1
    return Stopped(LauncherStop.UNKNOWN_OPTION, token)


def skip_launcher(spec: LauncherSpec, argv: Sequence[str], i: int) -> int | Stopped:
    """The index of the program a transparent launcher runs, its options starting at ``argv[i]``."""
    while i < len(argv):
        token = argv[i]
        if token == "--":
            i += 1
            break
        if token == "-" and spec.dash_is_option:
            i += 1
            continue
        if spec.numeric_options and _NUMERIC_OPTION.fullmatch(token):
            step: int | Stopped = 1
        elif token.startswith("--"):
            step = _long_option(spec, token)
        elif token.startswith("-") and len(token) > 1:
            step = _short_cluster(spec, token)
        else:
            break
        if isinstance(step, Stopped):
            return step
        i += step
    while spec.assignments and i < len(argv) and "=" in argv[i]:
        i += 1
    return min(i + spec.operands, len(argv))

"""Transparent launchers: each one's options skipped to the program it runs, and the options that stop the walk."""

from __future__ import annotations

import pytest

from gpuctl.core.kvcache.launchers import LAUNCHERS, LauncherStop, Stopped, skip_launcher


@pytest.mark.parametrize(
    ("argv", "program"),
    [
        (["tini", "--", "p"], 2),
        (["tini", "-s", "-p", "SIGTERM", "p"], 4),
        (["dumb-init", "--rewrite", "15:2", "p"], 3),
        (["env", "-i", "-u", "NAME", "A=1", "B=2", "p"], 6),
        (["env", "-", "p"], 2),
        (["exec", "p"], 1),
        (["nice", "-n", "5", "p"], 3),
        (["nice", "-n5", "p"], 2),
        (["nice", "-19", "p"], 2),
        (["nice", "--adjustment", "5", "p"], 3),
        (["nohup", "p"], 1),
        (["setsid", "-fw", "p"], 2),
        (["stdbuf", "-i0", "-o", "L", "p"], 4),
        (["timeout", "10", "p"], 2),
        (["timeout", "--signal=KILL", "-k", "5", "10", "p"], 5),
        (["taskset", "-c", "0-3", "p"], 3),
        (["taskset", "0x3", "p"], 2),
        (["numactl", "-c", "0", "-l", "p"], 4),
        (["numactl", "--membind", "0", "--", "p"], 4),
        (["chrt", "-f", "50", "p"], 3),
        (["chrt", "--sched-runtime", "100", "-d", "0", "p"], 5),
        (["ionice", "-c3", "p"], 2),
        (["timeout", "10"], 2),
    ],
)
def test_a_launchers_options_are_skipped_to_its_program(argv: list[str], program: int) -> None:
    assert skip_launcher(LAUNCHERS[argv[0]], argv, 1) == program


@pytest.mark.parametrize(
    ("argv", "stopped"),
    [
        (["env", "-S", "p a"], Stopped(LauncherStop.SPLIT_STRING, "-S")),
        (["env", "-iS", "p a"], Stopped(LauncherStop.SPLIT_STRING, "-S")),
        (["env", "--split-string=p a"], Stopped(LauncherStop.SPLIT_STRING, "--split-string")),
        (["taskset", "-p", "0x3", "1"], Stopped(LauncherStop.UNKNOWN_OPTION, "-p")),
        (["chrt", "-m"], Stopped(LauncherStop.UNKNOWN_OPTION, "-m")),
        (["numactl", "--show"], Stopped(LauncherStop.UNKNOWN_OPTION, "--show")),
        (["tini", "-z", "--", "p"], Stopped(LauncherStop.UNKNOWN_OPTION, "-z")),
    ],
)
def test_options_that_cannot_be_read_past_stop_the_walk(argv: list[str], stopped: Stopped) -> None:
    assert skip_launcher(LAUNCHERS[argv[0]], argv, 1) == stopped

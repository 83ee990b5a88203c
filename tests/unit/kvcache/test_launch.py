"""The launch check: real-world command lines, the launch table (every entry point, launcher, shell and wrapper form),
and a shell command mode refused whatever surrounds it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.core.kvcache.launch import LaunchRefusal, parse_launch

V = LaunchRefusal


# ----------------------------------------------------------------------------------------------- the launch grammar

FWD = True
# (command, args, engine, forwarded, accepted, program, refusal)
COMMAND_LINES: list[tuple[list[str] | None, list[str] | None, str, bool, bool, str, LaunchRefusal | None]] = [
    # vLLM: the entry point, directly and behind transparent launchers
    (["vllm", "serve", "meta-llama/Llama-3.1-8B"], None, "vLLM", False, True, "vllm", None),
    (["vllm"], ["serve", "--model", "Qwen/Qwen3-8B"], "vLLM", False, True, "vllm", None),
    (["vllm", "serve"], None, "vLLM", False, True, "vllm", None),
    (["/usr/local/bin/vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["/opt/venv/bin/vllm"], ["serve", "m", "--tensor-parallel-size", "2"], "vLLM", False, True, "vllm", None),
    (["/usr/bin/tini", "--", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["tini", "-s", "--", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["tini", "-g", "-p", "SIGTERM", "--"], ["vllm", "serve", "m"], "vLLM", False, True, "vllm", None),
    (["dumb-init", "--", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["dumb-init", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["dumb-init", "-c", "--rewrite", "15:2", "--", "vllm"], ["serve", "m"], "vLLM", False, True, "vllm", None),
    (["env", "CUDA_VISIBLE_DEVICES=0", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["/usr/bin/env", "-u", "HTTP_PROXY", "VLLM_USE_V1=1", "vllm", "serve"], None, "vLLM", False, True, "vllm", None),
    (["env", "-i", "--", "PATH=/usr/bin", "vllm"], ["serve", "m"], "vLLM", False, True, "vllm", None),
    (["exec", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["tini", "--", "env", "HF_HOME=/data", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["vllm"], ["serve", "m"], "vllm-ascend", False, True, "vllm", None),
    # vLLM: forms that are not the entry point
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], None, "vLLM", False, False,
     "python3 -m vllm.entrypoints.openai.api_server", V.UNRECOGNISED_PROGRAM),
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], None, "vLLM", FWD, True,
     "python3 -m vllm.entrypoints.openai.api_server", None),
    (["sh", "-c", "vllm serve m"], None, "vLLM", False, False, "sh -c", V.SHELL_COMMAND),
    (["/bin/sh", "-c", "exec vllm serve m"], None, "vLLM", FWD, False, "sh -c", V.SHELL_COMMAND),
    (["bash", "-lc", "source /venv/bin/activate && vllm serve m"], None, "vLLM", FWD, False, "bash -lc",
     V.SHELL_COMMAND),
    (["bash", "-o", "pipefail", "-c", "vllm serve m"], None, "vLLM", False, False, "bash -c", V.SHELL_COMMAND),
    (["busybox", "sh", "-c", "vllm serve m"], None, "vLLM", FWD, False, "sh -c", V.SHELL_COMMAND),
    (["tini", "--", "bash", "-c", "vllm serve m"], None, "vLLM", FWD, False, "bash -c", V.SHELL_COMMAND),
    (["/entrypoint"], ["vllm", "serve", "m"], "vLLM", False, False, "/entrypoint", V.WRAPPER),
    (["/entrypoint"], ["vllm", "serve", "m"], "vLLM", FWD, True, "/entrypoint", None),
    (["run"], None, "vLLM", False, False, "run", V.WRAPPER),
    (["./run.sh"], None, "vLLM", False, False, "./run.sh", V.SCRIPT),
    (["sh", "/app/run.sh"], None, "vLLM", False, False, "sh /app/run.sh", V.SCRIPT),
    (["bash", "/app/start.sh", "--model", "m"], None, "vLLM", FWD, True, "bash /app/start.sh", None),
    (["tini", "--"], [], "vLLM", FWD, False, "tini", V.LAUNCHER_WITHOUT_PROGRAM),
    (["dumb-init", "--"], None, "vLLM", False, False, "dumb-init", V.LAUNCHER_WITHOUT_PROGRAM),
    (["env", "A=1"], None, "vLLM", FWD, False, "env", V.LAUNCHER_WITHOUT_PROGRAM),
    (["env", "-S", "vllm serve m"], None, "vLLM", False, False, "", V.HIDDEN_COMMAND_LINE),
    (["env", "--split-string=vllm serve m"], None, "vLLM", FWD, True, "", None),
    (["vllm serve m"], None, "vLLM", False, False, "", V.HIDDEN_COMMAND_LINE),
    (["tini", "--", "vllm serve m"], None, "vLLM", FWD, True, "", None),
    (None, ["serve", "--model", "m"], "vLLM", False, False, "", V.ARGS_WITHOUT_COMMAND),
    (None, ["serve", "--model", "m"], "vLLM", FWD, True, "", None),
    (None, ["sh", "-c", "vllm serve m"], "vLLM", FWD, False, "sh -c", V.SHELL_COMMAND),
    (None, None, "vLLM", FWD, False, "", V.NO_COMMAND),
    ([], [], "vLLM", False, False, "", V.NO_COMMAND),
    (["python3", "-m", "sglang.launch_server", "--model-path", "m"], None, "vLLM", FWD, False,
     "python3 -m sglang.launch_server", V.OTHER_ENGINE),
    (["text-generation-launcher", "--model-id", "m"], None, "vLLM", False, False, "text-generation-launcher",
     V.UNRECOGNISED_PROGRAM),
    (["numactl", "--cpunodebind=0", "vllm", "serve", "m"], None, "vLLM", FWD, True, "vllm", None),
    (["gosu", "app", "vllm", "serve", "m"], None, "vLLM", FWD, True, "gosu", None),
    (["gosu", "app", "vllm", "serve", "m"], None, "vLLM", False, False, "gosu", V.UNRECOGNISED_PROGRAM),
    (["tini", "-z", "--", "vllm", "serve"], None, "vLLM", False, False, "tini", V.UNRECOGNISED_PROGRAM),
    # SGLang
    (["python3", "-m", "sglang.launch_server", "--model-path", "m"], None, "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["python", "-m", "sglang.launch_server"], ["--model-path", "m"], "SGLang", False, True,
     "python -m sglang.launch_server", None),
    (["python3.11", "-m", "sglang.launch_server"], None, "sglang", False, True, "python3.11 -m sglang.launch_server",
     None),
    (["/usr/bin/python3", "-u", "-m", "sglang.launch_server"], None, "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["dumb-init", "--", "python3", "-m", "sglang.launch_server", "--model-path", "m"], None, "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["python3"], ["-m", "sglang.launch_server", "--model-path", "m"], "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["python3", "-msglang.launch_server"], None, "SGLang", False, True, "python3 -m sglang.launch_server", None),
    (["python3", "-X", "faulthandler", "-W", "ignore", "-m", "sglang.launch_server"], None, "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["env", "PYTHONUNBUFFERED=1", "python3", "-m", "sglang.launch_server"], None, "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["vllm", "serve", "m"], None, "SGLang", FWD, False, "vllm", V.OTHER_ENGINE),
    (["sglang", "serve", "--model-path", "m"], None, "SGLang", False, False, "sglang", V.UNRECOGNISED_PROGRAM),
    (["python3", "-m", "sglang_router.launch_router"], None, "SGLang", False, False,
     "python3 -m sglang_router.launch_router", V.UNRECOGNISED_PROGRAM),
    (["python3", "launch.py", "--model-path", "m"], None, "SGLang", False, False, "python3 launch.py",
     V.UNRECOGNISED_PROGRAM),
    (["python3", "-c", "import sglang.launch_server"], None, "SGLang", False, False, "", V.HIDDEN_COMMAND_LINE),
    (["python3", "-c", "import runpy, sys; runpy.run_module('sglang.launch_server')"], None, "SGLang", FWD, True, "",
     None),
    (["python3"], None, "SGLang", FWD, False, "python3", V.LAUNCHER_WITHOUT_PROGRAM),
    (["python2", "-m", "sglang.launch_server"], None, "SGLang", False, False, "python2", V.UNRECOGNISED_PROGRAM),
    (["tini", "--", "bash", "-c", "python3 -m sglang.launch_server"], None, "SGLang", FWD, False, "bash -c",
     V.SHELL_COMMAND),
    (["/docker-entrypoint.sh", "python3", "-m", "sglang.launch_server"], None, "SGLang", False, False,
     "/docker-entrypoint.sh", V.SCRIPT),
    (["/docker-entrypoint.sh", "python3", "-m", "sglang.launch_server"], None, "SGLang", FWD, True,
     "/docker-entrypoint.sh", None),
    (None, ["python3", "-m", "sglang.launch_server"], "SGLang", False, False, "", V.ARGS_WITHOUT_COMMAND),
]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "args", "engine", "forwarded", "accepted", "program", "refusal"),
    COMMAND_LINES,
    ids=[" ".join([*(c or []), "|", *(a or [])]) + f" [{e}{' fwd' if f else ''}]" for c, a, e, f, *_ in COMMAND_LINES],
)
def test_real_world_command_lines(
    command: list[str] | None,
    args: list[str] | None,
    engine: str,
    forwarded: bool,
    accepted: bool,
    program: str,
    refusal: LaunchRefusal | None,
) -> None:
    verdict = parse_launch(command, args, engine, forwarded)
    assert (verdict.accepted, verdict.program, verdict.refusal) == (accepted, program, refusal), verdict.reason
    assert verdict.reason
    if accepted:
        recognised = program in ("vllm",) or program.endswith(" -m sglang.launch_server")
        assert verdict.args_forwarded is (forwarded and not recognised)
        assert verdict.append_to == ("args" if args else "command")


def test_the_table_covers_at_least_forty_command_lines() -> None:
    assert len(COMMAND_LINES) >= 40


def test_an_unsupported_engine_refuses_every_launch() -> None:
    verdict = parse_launch(["vllm", "serve"], None, "TGI", True)
    assert (verdict.accepted, verdict.refusal) == (False, V.UNSUPPORTED_ENGINE)


# ----------------------------------------------------------------------------------------------- the launch table

E, S = "vLLM", "SGLang"
SERVE = ["serve", "--model", "m"]
SGL = ["python3", "-m", "sglang.launch_server"]
SGL_ARGS = ["--model-path", "m"]
# (command, args, engine, forwarded, expected): a program string is an accepted launch resolved to that program; a
# LaunchRefusal is the kind of refusal.
LaunchCase = tuple[list[str] | None, list[str] | None, str, bool, str | LaunchRefusal]
LAUNCH_TABLE: list[LaunchCase] = [
    # the entry points
    (["vllm", *SERVE], None, E, False, "vllm"),
    (["vllm"], SERVE, E, True, "vllm"),
    (["/usr/local/bin/vllm"], ["serve"], E, False, "vllm"),
    (["vllm"], SERVE, "vllm", False, "vllm"),
    (["vllm"], SERVE, "vllm-ascend", True, "vllm"),
    (SGL, SGL_ARGS, S, False, "python3 -m sglang.launch_server"),
    (["python", "-m", "sglang.launch_server"], SGL_ARGS, S, True, "python -m sglang.launch_server"),
    (["python3.11", "-m", "sglang.launch_server"], None, "sglang", False, "python3.11 -m sglang.launch_server"),
    (["/usr/bin/python3.12", "-u", "-m", "sglang.launch_server"], SGL_ARGS, S, False,
     "python3.12 -m sglang.launch_server"),
    (["python3", "-msglang.launch_server"], None, S, True, "python3 -m sglang.launch_server"),
    (["python3", "-O", "-X", "dev", "-m", "sglang.launch_server"], None, S, False, "python3 -m sglang.launch_server"),
    # the other engine, a non-entry program of the declared one, an unsupported engine
    (SGL, SGL_ARGS, E, True, V.OTHER_ENGINE),
    (["vllm", "serve"], None, S, False, V.OTHER_ENGINE),
    (["python3", "-m", "vllm.entrypoints.openai.api_server"], None, E, False, V.UNRECOGNISED_PROGRAM),
    (["python3", "-m", "vllm.entrypoints.openai.api_server"], None, E, True,
     "python3 -m vllm.entrypoints.openai.api_server"),
    (["sglang", "serve"], SGL_ARGS, S, True, "sglang"),
    (["vllm", "serve"], None, "TGI", True, V.UNSUPPORTED_ENGINE),
    # every transparent launcher
    (["tini", "--", "vllm", *SERVE], None, E, False, "vllm"),
    (["tini-static", "-s", "--", "vllm"], SERVE, E, False, "vllm"),
    (["dumb-init", "--single-child", "vllm"], SERVE, E, False, "vllm"),
    (["env", "-i", "PATH=/usr/bin", "vllm"], SERVE, E, False, "vllm"),
    (["env", "VLLM_USE_V1=1", "vllm"], SERVE, E, False, "vllm"),
    (["env", "-u", "HTTP_PROXY", "vllm"], SERVE, E, False, "vllm"),
    (["env", "--unset=HTTP_PROXY", "--", "vllm"], SERVE, E, False, "vllm"),
    (["exec", "vllm"], SERVE, E, False, "vllm"),
    (["nice", "-n", "10", "vllm"], SERVE, E, False, "vllm"),
    (["nice", "-5", "vllm"], SERVE, E, False, "vllm"),
    (["nice", "--adjustment=5", *SGL], SGL_ARGS, S, False, "python3 -m sglang.launch_server"),
    (["nohup", "vllm"], SERVE, E, False, "vllm"),
    (["setsid", "-f", "vllm"], SERVE, E, False, "vllm"),
    (["stdbuf", "-oL", "-eL", "vllm"], SERVE, E, False, "vllm"),
    (["stdbuf", "--output=L", *SGL], SGL_ARGS, S, False, "python3 -m sglang.launch_server"),
    (["timeout", "3600", "vllm"], SERVE, E, False, "vllm"),
    (["timeout", "-s", "KILL", "-k", "10", "1h", "vllm"], SERVE, E, False, "vllm"),
    (["taskset", "0x3", "vllm"], SERVE, E, False, "vllm"),
    (["taskset", "-c", "0-3", *SGL], SGL_ARGS, S, False, "python3 -m sglang.launch_server"),
    (["numactl", "--cpunodebind=0", "--membind=0", "vllm"], SERVE, E, False, "vllm"),
    (["numactl", "-N", "0", "-m", "0", "--", "vllm"], SERVE, E, False, "vllm"),
    (["chrt", "-f", "50", "vllm"], SERVE, E, False, "vllm"),
    (["chrt", "--other", "0", *SGL], SGL_ARGS, S, False, "python3 -m sglang.launch_server"),
    (["ionice", "-c", "2", "-n", "0", "vllm"], SERVE, E, False, "vllm"),
    (["ionice", "-t", "vllm"], SERVE, E, True, "vllm"),
    (["busybox", "env", "A=1", "vllm"], SERVE, E, False, "vllm"),
    # nested launchers
    (["tini", "--", "env", "A=1", "nice", "-n", "5", "numactl", "--interleave=all", "vllm"], SERVE, E, False, "vllm"),
    (["dumb-init", "--", "timeout", "1h", "taskset", "-c", "0-7", *SGL], SGL_ARGS, S, False,
     "python3 -m sglang.launch_server"),
    (["/usr/bin/env", "-i", "/usr/bin/nice", "-n", "1", "/usr/bin/vllm"], SERVE, E, False, "vllm"),
    (["setsid", "nohup", "stdbuf", "-oL", "ionice", "-c", "3", "chrt", "-b", "0", "vllm"], SERVE, E, False, "vllm"),
    # launchers naming nothing, and launcher options that cannot be placed
    (["tini", "--"], [], E, True, V.LAUNCHER_WITHOUT_PROGRAM),
    (["tini", "--"], None, S, False, V.LAUNCHER_WITHOUT_PROGRAM),
    (["nice"], None, E, True, V.LAUNCHER_WITHOUT_PROGRAM),
    (["timeout", "10"], None, E, True, V.LAUNCHER_WITHOUT_PROGRAM),
    (["env", "-i", "A=1"], None, E, True, V.LAUNCHER_WITHOUT_PROGRAM),
    (["busybox"], None, E, True, V.LAUNCHER_WITHOUT_PROGRAM),
    (["taskset", "-p", "0x3", "1"], None, E, False, V.UNRECOGNISED_PROGRAM),
    (["nice", "--bogus", "vllm"], SERVE, E, True, "nice"),
    # scripts, .sh programs, wrappers, unrecognised programs
    (["./run.sh"], SERVE, E, True, "./run.sh"),
    (["/app/start.sh", "--model", "m"], None, E, False, V.SCRIPT),
    (["bash", "/app/run.sh"], SERVE, E, False, V.SCRIPT),
    (["bash", "/app/run.sh"], SERVE, E, True, "bash /app/run.sh"),
    (["bash", "-e", "-o", "pipefail", "/app/run.sh"], SERVE, E, True, "bash /app/run.sh"),
    (["sh", "-x", "./start.sh"], SGL_ARGS, S, True, "sh ./start.sh"),
    (["/usr/local/bin/bash", "--norc", "/app/run.sh"], None, E, False, V.SCRIPT),
    (["sh", "./start"], None, E, False, V.UNRECOGNISED_PROGRAM),
    (["sh", "./start"], None, E, True, "sh ./start"),
    (["/entrypoint"], SERVE, E, True, "/entrypoint"),
    (["/usr/local/bin/entrypoint"], SERVE, E, False, V.WRAPPER),
    (["run", "vllm"], SERVE, E, False, V.WRAPPER),
    (["tini", "--", "/entrypoint.sh", "vllm"], SERVE, E, True, "/entrypoint.sh"),
    (["text-generation-launcher", "--model-id", "m"], None, E, False, V.UNRECOGNISED_PROGRAM),
    (["python3", "serve.py"], SGL_ARGS, S, True, "python3 serve.py"),
    # command lines hidden in one argument
    (["python3", "-c", "import sglang"], None, S, False, V.HIDDEN_COMMAND_LINE),
    (["python", "-c", "import runpy; runpy.run_module('vllm')"], None, E, True, ""),
    (["env", "-S", "vllm serve m"], None, E, True, ""),
    (["env", "--split-string", "vllm serve m"], None, E, False, V.HIDDEN_COMMAND_LINE),
    (["env", "-iS", "vllm serve m"], None, E, False, V.HIDDEN_COMMAND_LINE),
    (["tini", "--", "vllm serve m"], None, E, False, V.HIDDEN_COMMAND_LINE),
    # args without command, and nothing at all
    (None, SERVE, E, False, V.ARGS_WITHOUT_COMMAND),
    (None, ["--model", "m"], E, True, ""),
    (None, ["bash", "-c", "vllm serve m"], E, True, V.SHELL_COMMAND),
    (None, ["tini", "--", "sh", "-c", "vllm serve m"], E, True, V.SHELL_COMMAND),
    (None, None, E, True, V.NO_COMMAND),
    ([], [], S, False, V.NO_COMMAND),
    # every shell in its command mode, with and without the forwarding declaration
    *[([shell, "-c", "vllm serve m"], None, E, forwarded, V.SHELL_COMMAND)
      for shell in ("sh", "bash", "dash", "ash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "oksh", "lksh", "csh",
                    "tcsh", "fish", "yash", "rbash", "posh")
      for forwarded in (False, True)],
    # paths, versions and builds of a shell
    (["/bin/sh", "-c", "exec vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["/usr/local/bin/bash", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash5", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["/opt/bin/bash-5.2", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["zsh-5.9", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["/bin/bash-static", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    # option clusters holding c, options before -c, and the long spellings
    (["bash", "-lc", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["sh", "-ec", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "-xc", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "-cl", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "+c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "-l", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "--login", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "-login", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["sh", "-e", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["sh", "-e", "-u", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "-o", "pipefail", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "-O", "extglob", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "--rcfile", "/etc/profile", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "--init-file", "/etc/profile", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "--norc", "--noprofile", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["zsh", "-f", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["zsh", "--emulate", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["fish", "--command=vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["fish", "--command", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["fish", "-l", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["fish", "-C", "set -x A 1", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["csh", "-f", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["tcsh", "-fc", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["yash", "--cmdline", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "-c"], ["vllm serve m"], E, True, V.SHELL_COMMAND),
    (["sh"], ["-c", "vllm serve m"], E, True, V.SHELL_COMMAND),
    # commands read from stdin
    (["bash", "-s"], SERVE, E, True, V.SHELL_COMMAND),
    (["bash", "-o", "pipefail", "-s"], SERVE, E, True, V.SHELL_COMMAND),
    (["zsh", "-o", "shinstdin"], SERVE, E, True, V.SHELL_COMMAND),
    # multi-call binaries
    (["busybox", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["busybox", "ash", "-c", "vllm serve m"], None, E, False, V.SHELL_COMMAND),
    (["busybox", "bash", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["toybox", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    # shells behind every launcher
    (["env", "-i", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["env", "VLLM_USE_V1=1", "bash", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["env", "-u", "HTTP_PROXY", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["nice", "-n", "5", "bash", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["timeout", "10", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["nohup", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["setsid", "bash", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["stdbuf", "-oL", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["taskset", "-c", "0", "bash", "-lc", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["numactl", "-c", "0", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["chrt", "-r", "10", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["ionice", "-c", "3", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["dumb-init", "bash", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["exec", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["tini", "--", "env", "A=1", "nice", "numactl", "--interleave=all", "busybox", "sh", "-c", "x"], None, S, True,
     V.SHELL_COMMAND),
    # a shell command mode behind a program admission cannot open
    (["/entrypoint.sh", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["gosu", "app", "bash", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["tini", "-z", "--", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    (["bash", "/app/run.sh", "sh", "-c", "vllm serve m"], None, E, True, V.SHELL_COMMAND),
    # not shells, or shells naming nothing
    (["python", "-c", "import vllm"], None, E, False, V.HIDDEN_COMMAND_LINE),
    (["bash"], None, E, True, V.LAUNCHER_WITHOUT_PROGRAM),
    (["sh", "-e"], None, E, True, V.LAUNCHER_WITHOUT_PROGRAM),
]  # fmt: skip


def _case_id(case: LaunchCase) -> str:
    command, args, engine, forwarded, _ = case
    return " ".join([*(command or ["∅"]), "|", *(args or ["∅"])]) + f" [{engine}{' fwd' if forwarded else ''}]"


@pytest.mark.parametrize(
    ("command", "args", "engine", "forwarded", "expected"), LAUNCH_TABLE, ids=[_case_id(case) for case in LAUNCH_TABLE]
)
def test_the_launch_table(
    command: list[str] | None, args: list[str] | None, engine: str, forwarded: bool, expected: str | LaunchRefusal
) -> None:
    verdict = parse_launch(command, args, engine, forwarded)
    assert verdict.reason
    if isinstance(expected, LaunchRefusal):
        assert (verdict.accepted, verdict.refusal) == (False, expected), verdict.reason
        if expected is V.SHELL_COMMAND:
            assert f"{json.dumps(verdict.program)} is a shell command mode" in verdict.reason
            assert "appended arguments become the shell's positional parameters and never reach the engine" in (
                verdict.reason
            )
        return
    assert (verdict.accepted, verdict.program, verdict.refusal) == (True, expected, None), verdict.reason
    entry_point = expected == "vllm" or expected.endswith(" -m sglang.launch_server")
    assert verdict.args_forwarded is (forwarded and not entry_point)
    assert verdict.append_to == ("args" if args else "command")


def test_the_launch_table_holds_at_least_eighty_distinct_command_lines() -> None:
    lines = {(tuple(c or ()), tuple(a or ()), e, f) for c, a, e, f, _ in LAUNCH_TABLE}
    assert len(lines) == len(LAUNCH_TABLE)
    assert len(lines) >= 80


# ----------------------------------------------------------------------------------------------- property: shells

SHELLS = (
    "sh", "bash", "dash", "ash", "zsh", "ksh", "ksh93", "mksh", "pdksh", "oksh", "lksh", "csh", "tcsh", "fish",
    "yash", "rbash", "posh",
)  # fmt: skip
PATH_PREFIXES = ("", "/bin/", "/usr/bin/", "/usr/local/bin/", "/opt/conda/bin/", "./")
VERSION_SUFFIXES = ("", "5", "-5.2", "5.1", "_4", "-5.2.15", "-static", "5-static")
LAUNCHER_PREFIXES = (
    ["tini", "--"], ["tini-static", "-s", "--"], ["/usr/bin/tini", "-g", "--"], ["dumb-init"],
    ["dumb-init", "--single-child", "--"], ["env"], ["env", "-i"], ["env", "VAR=x"], ["env", "-u", "NAME"],
    ["/usr/bin/env", "-i", "PATH=/bin"], ["exec"], ["nice"], ["nice", "-n", "10"], ["nice", "-5"], ["nohup"],
    ["setsid"], ["setsid", "-f"], ["stdbuf", "-oL"], ["stdbuf", "-o", "L", "-e", "L"], ["timeout", "1h"],
    ["timeout", "-s", "KILL", "30"], ["taskset", "0x3"], ["taskset", "-c", "0-3"], ["numactl", "--interleave=all"],
    ["numactl", "-N", "0", "-m", "0"], ["numactl", "-c", "0", "--"], ["chrt", "-r", "10"], ["chrt", "--batch", "0"],
    ["ionice", "-c", "3"], ["ionice", "-c", "2", "-n", "7"], ["busybox"], ["toybox"],
)  # fmt: skip
BOURNE_OPTIONS = (["-l"], ["-e"], ["-x"], ["-u"], ["-i"], ["--login"], ["-o", "pipefail"], ["+x"])
OPTIONS_BEFORE = {
    "csh": (["-f"], ["-e"], ["-x"], ["-v"], ["-i"]),
    "tcsh": (["-f"], ["-e"], ["-x"], ["-v"], ["-i"], ["-q"]),
    "fish": (["-l"], ["-i"], ["--login"], ["-C", "set -x A 1"], ["--init-command=true"], ["-p", "/tmp/profile"]),
}
COMMAND_MODES = ("-c", "-lc", "-ec", "-xc", "-cl", "-ic", "-ce")


@settings(max_examples=400, deadline=None)
@given(
    shell=st.sampled_from(SHELLS),
    path=st.sampled_from(PATH_PREFIXES),
    version=st.sampled_from(VERSION_SUFFIXES),
    launchers=st.lists(st.sampled_from(LAUNCHER_PREFIXES), max_size=4),
    options=st.data(),
    mode=st.sampled_from(COMMAND_MODES),
    script=st.text(),
    rest=st.lists(st.text(), max_size=3),
    split=st.integers(min_value=1),
    engine=st.sampled_from(["vLLM", "SGLang", "vllm-ascend"]),
    forwarded=st.booleans(),
)
def test_a_shell_command_mode_is_refused_whatever_the_forwarding_declaration(
    shell: str,
    path: str,
    version: str,
    launchers: list[list[str]],
    options: st.DataObject,
    mode: str,
    script: str,
    rest: list[str],
    split: int,
    engine: str,
    forwarded: bool,
) -> None:
    name = shell + ("" if shell == "ksh93" and version else version)
    before = options.draw(st.lists(st.sampled_from(OPTIONS_BEFORE.get(shell, BOURNE_OPTIONS)), max_size=3))
    argv = [*(t for prefix in launchers for t in prefix), path + name, *(t for o in before for t in o), mode, script]
    argv += rest
    at = min(split, len(argv))
    verdict = parse_launch(argv[:at], argv[at:] or None, engine, forwarded)
    assert (verdict.accepted, verdict.refusal) == (False, V.SHELL_COMMAND), (argv, verdict.reason)
    assert verdict.program == f"{name} {mode}"

"""The launch check: whether arguments appended to a container's launch reach the declared engine.

The full command line (``command`` + ``args``) is walked past the transparent launchers to the program it runs; only the
declared engine's entry point is accepted outright. A Pod author may declare that an unrecognised launcher, script,
wrapper or hidden command line forwards appended arguments, but never a shell command mode: whatever shell runs it, the
appended arguments become the shell's positional parameters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from gpuctl.core.compat import StrEnum
from gpuctl.core.kvcache.engines import SGLANG_MODULE, Family, family_of
from gpuctl.core.kvcache.keys import ANNOTATION_ENGINE, ANNOTATION_FORWARDED, FORWARDING_DECLARATION, LABEL_INJECT
from gpuctl.core.kvcache.launchers import LAUNCHERS, MULTI_CALL, LauncherStop, Stopped, skip_launcher
from gpuctl.core.kvcache.shells import ShellLaunch, ShellMode, read_shell, shell_grammar


class LaunchRefusal(StrEnum):
    NO_COMMAND = "no-command"
    ARGS_WITHOUT_COMMAND = "args-without-command"
    LAUNCHER_WITHOUT_PROGRAM = "launcher-without-program"
    SHELL_COMMAND = "shell-command"
    HIDDEN_COMMAND_LINE = "hidden-command-line"
    SCRIPT = "script"
    WRAPPER = "wrapper"
    UNRECOGNISED_PROGRAM = "unrecognised-program"
    OTHER_ENGINE = "other-engine"
    UNSUPPORTED_ENGINE = "unsupported-engine"


NOT_FORWARDABLE: Final = frozenset(
    {LaunchRefusal.LAUNCHER_WITHOUT_PROGRAM, LaunchRefusal.SHELL_COMMAND, LaunchRefusal.OTHER_ENGINE}
)
"""Refusals the forwarding declaration cannot lift: admission knows appended arguments do not reach the engine."""


@dataclass(frozen=True, slots=True)
class LaunchVerdict:
    """Whether arguments appended to a container's launch reach the declared engine."""

    accepted: bool
    program: str
    """The executable left after the launcher prefixes (``vllm``, ``python3 -m sglang.launch_server``, ``run.sh``…);
    empty when there is none to read (an image ENTRYPOINT, a command line hidden in one argument)."""
    reason: str
    refusal: LaunchRefusal | None = None
    args_forwarded: bool = False
    """The author's forwarding declaration is what admitted the launch."""
    append_to: Literal["command", "args"] = "command"
    """Where injected arguments go: ``args`` when the container declares any, else ``command``."""
    field: Literal["command", "args"] = "command"
    """The container field a refusal is about."""


class _Kind(StrEnum):
    ENGINE = "engine"
    NO_PROGRAM = "no-program"
    SHELL = "shell"
    HIDDEN = "hidden"
    SCRIPT = "script"
    WRAPPER = "wrapper"
    UNRECOGNISED = "unrecognised"


@dataclass(frozen=True, slots=True)
class _Found:
    """What a command line resolves to once the launcher prefixes are removed."""

    kind: _Kind
    program: str
    family: Family | None = None
    entry: bool = False
    launcher: str = ""
    """For NO_PROGRAM and HIDDEN: the launcher (or interpreter) that names nothing, or splits a string itself."""
    position: int = 0
    """The index of the token the walk stopped at (the program, or the launcher it could not read past)."""


_OPAQUE: Final = frozenset({_Kind.SCRIPT, _Kind.WRAPPER, _Kind.UNRECOGNISED})
"""Programs admission cannot open: what they run with the rest of the command line is unknown."""

WRAPPERS: Final = frozenset({"entrypoint", "run"})
_PYTHON = re.compile(r"python(3(\.\d+)?)?")


def basename(token: str) -> str:
    return token.rstrip("/").rsplit("/", 1)[-1]


def _classify_script(script: str, program: str, position: int) -> _Found:
    name = basename(script)
    if name.endswith(".sh"):
        return _Found(_Kind.SCRIPT, program, position=position)
    if name in WRAPPERS:
        return _Found(_Kind.WRAPPER, program, position=position)
    return _Found(_Kind.UNRECOGNISED, program, position=position)


def _shell_at(argv: Sequence[str], i: int) -> tuple[str, ShellLaunch] | None:
    """The shell at ``argv[i]`` (its base name) and how it is launched; None when ``argv[i]`` is not a shell."""
    shell = basename(argv[i])
    grammar = shell_grammar(shell)
    return None if grammar is None else (shell, read_shell(grammar, argv, i))


def _shell_command(shell: str, launch: ShellLaunch, i: int) -> _Found:
    return _Found(_Kind.SHELL, f"{shell} {launch.selector}", position=i)


def _shell(argv: Sequence[str], i: int) -> _Found | None:
    """``<shell> [options] [-c string | script]``: a command mode, a script, or a shell naming nothing; None when
    ``argv[i]`` is not a shell."""
    read = _shell_at(argv, i)
    if read is None:
        return None
    shell, launch = read
    if launch.mode is ShellMode.COMMAND:
        return _shell_command(shell, launch, i)
    if launch.mode is ShellMode.NOTHING:
        return _Found(_Kind.NO_PROGRAM, shell, launcher=shell, position=i)
    script = argv[launch.script]
    return _classify_script(script, f"{shell} {script}", i)


def _module(python: str, module: str, position: int) -> _Found:
    program = f"{python} -m {module}"
    if module == SGLANG_MODULE:
        return _Found(_Kind.ENGINE, program, Family.SGLANG, entry=True, position=position)
    if module == "sglang" or module.startswith("sglang."):
        return _Found(_Kind.ENGINE, program, Family.SGLANG, position=position)
    if module == "vllm" or module.startswith("vllm."):
        return _Found(_Kind.ENGINE, program, Family.VLLM, position=position)
    return _Found(_Kind.UNRECOGNISED, program, position=position)


def _python(argv: Sequence[str], i: int) -> _Found:
    """``python [options] (-m module | -c code | script | -)``."""
    python = basename(argv[i])
    j = i + 1
    while j < len(argv):
        token = argv[j]
        if token == "--":
            j += 1
            break
        if token == "-":
            return _Found(_Kind.UNRECOGNISED, f"{python} -", position=i)
        if token.startswith("--"):
            j += 2 if token == "--check-hash-based-pycs" else 1
            continue
        if not token.startswith("-"):
            break
        step = 1
        for pos, char in enumerate(token[1:], 1):
            rest = token[pos + 1 :]
            if char in "mc":
                value = rest or (argv[j + 1] if j + 1 < len(argv) else "")
                if not value:
                    return _Found(_Kind.NO_PROGRAM, python, launcher=f"{python} -{char}", position=i)
                if char == "c":
                    return _Found(_Kind.HIDDEN, "", launcher=f"{python} -c", position=i)
                return _module(python, value, i)
            if char in "WX":
                step = 1 if rest else 2
                break
        j += step
    if j >= len(argv):
        return _Found(_Kind.NO_PROGRAM, python, launcher=python, position=i)
    return _classify_script(argv[j], f"{python} {argv[j]}", i)


def _program(token: str, position: int) -> _Found:
    """An executable: the engine programs by their base name, anything else as written."""
    name = basename(token)
    if name == "vllm":
        return _Found(_Kind.ENGINE, name, Family.VLLM, entry=True, position=position)
    if name == "sglang":
        return _Found(_Kind.ENGINE, name, Family.SGLANG, position=position)
    return _classify_script(token, token, position)


def _walk(argv: Sequence[str]) -> _Found:
    """Walk a full command line past the transparent launchers to the program it runs."""
    i = 0
    launcher = ""
    while i < len(argv):
        token = argv[i]
        if any(c.isspace() for c in token):
            return _Found(_Kind.HIDDEN, "", launcher=f"argument {json.dumps(token)}", position=i)
        name = basename(token)
        spec = LAUNCHERS.get(name)
        if spec is not None:
            step = skip_launcher(spec, argv, i + 1)
            if isinstance(step, Stopped):
                if step.stop is LauncherStop.SPLIT_STRING:
                    return _Found(_Kind.HIDDEN, "", launcher=f"{name} {step.option}", position=i)
                return _Found(_Kind.UNRECOGNISED, name, position=i)
            launcher, i = name, step
            continue
        if name in MULTI_CALL:
            launcher, i = name, i + 1
            continue
        shell = _shell(argv, i)
        if shell is not None:
            return shell
        if _PYTHON.fullmatch(name):
            return _python(argv, i)
        return _program(token, i)
    return _Found(_Kind.NO_PROGRAM, launcher, launcher=launcher, position=len(argv))


def _shell_command_after(argv: Sequence[str], start: int) -> _Found | None:
    """A shell command mode further along the command line, which an opaque program is taken to run. A shell that runs
    a script is read past its options to that script (which may be a shell itself), so the search stays linear."""
    k = start
    while k < len(argv):
        read = _shell_at(argv, k)
        if read is None:
            k += 1
            continue
        shell, launch = read
        if launch.mode is ShellMode.COMMAND:
            return _shell_command(shell, launch, k)
        if launch.mode is ShellMode.NOTHING:
            return None
        k = launch.script
    return None


def _resolve_program(argv: Sequence[str]) -> _Found:
    """The program a command line runs. Behind a program admission cannot open (a script, a wrapper, an unrecognised
    program or launcher option), a shell command mode later on the line is taken to be what it runs: whatever forwards
    the rest of the line, the appended arguments end up as that shell's positional parameters."""
    found = _walk(argv)
    if found.kind in _OPAQUE:
        return _shell_command_after(argv, found.position + 1) or found
    return found


def _declare(what: str) -> str:
    return f"or declare {FORWARDING_DECLARATION} only if {what} forwards appended arguments to the engine"


def _launch_reason(found: _Found, family: Family) -> tuple[LaunchRefusal, str]:
    """Why a resolved launch is refused, with the fix."""
    direct = f"launch the engine directly ({family.entry_point} in command, its arguments in args)"
    if found.kind is _Kind.NO_PROGRAM:
        return LaunchRefusal.LAUNCHER_WITHOUT_PROGRAM, (
            f"{json.dumps(found.launcher)} names no program after it, so the appended connector flag would become "
            f"what it runs; put {family.entry_point} and its arguments after it"
        )
    if found.kind is _Kind.SHELL:
        return LaunchRefusal.SHELL_COMMAND, (
            f"{json.dumps(found.program)} is a shell command mode: the shell reads its commands from a string (or "
            "stdin), so appended arguments become the shell's positional parameters and never reach the engine, "
            f"even with {ANNOTATION_FORWARDED} declared; "
            f"{direct}, or drop the {LABEL_INJECT} label and configure the connector in that command yourself"
        )
    if found.kind is _Kind.HIDDEN:
        return LaunchRefusal.HIDDEN_COMMAND_LINE, (
            f"{found.launcher} hides the command line in one argument, so admission cannot see what runs or where "
            f"appended arguments go; {direct}, {_declare('that command line')}"
        )
    if found.kind is _Kind.SCRIPT:
        return LaunchRefusal.SCRIPT, (
            f"{json.dumps(found.program)} runs a script, and whether appended arguments reach the engine depends on "
            f'whether it forwards "$@"; {direct}, {_declare("the script")}'
        )
    if found.kind is _Kind.WRAPPER:
        return LaunchRefusal.WRAPPER, (
            f"{json.dumps(found.program)} is a wrapper admission cannot open; {direct}, {_declare('the wrapper')}"
        )
    if found.kind is _Kind.ENGINE and found.family is not family:
        other = found.family.value if found.family else "another engine"
        return LaunchRefusal.OTHER_ENGINE, (
            f"{json.dumps(found.program)} is {other}'s program, but {ANNOTATION_ENGINE} declares {family.value}; "
            f"launch {family.entry_point}, or declare the engine that runs"
        )
    return LaunchRefusal.UNRECOGNISED_PROGRAM, (
        f"{json.dumps(found.program)} is not the {family.value} entry point ({family.entry_point}); "
        f"{direct}, {_declare(json.dumps(found.program))}"
    )


def _refused(refusal: LaunchRefusal, reason: str, program: str, field: Literal["command", "args"]) -> LaunchVerdict:
    return LaunchVerdict(False, program, reason, refusal, field=field)


def _judge_found(
    found: _Found, family: Family, forwarded: bool, append_to: Literal["command", "args"]
) -> LaunchVerdict:
    if found.kind is _Kind.ENGINE and found.family is family and found.entry:
        return LaunchVerdict(
            True, found.program, f"{found.program} is the {family.value} entry point", append_to=append_to
        )
    refusal, reason = _launch_reason(found, family)
    if forwarded and refusal not in NOT_FORWARDABLE:
        return LaunchVerdict(
            True,
            found.program,
            f"{ANNOTATION_FORWARDED} declares that {found.program or found.launcher} forwards appended arguments",
            args_forwarded=True,
            append_to=append_to,
        )
    return _refused(refusal, reason, found.program, "command")


def _judge_args_only(args: list[str], family: Family, forwarded: bool) -> LaunchVerdict:
    if not forwarded:
        return _refused(
            LaunchRefusal.ARGS_WITHOUT_COMMAND,
            "the container declares args but no command, so the image ENTRYPOINT receiving them cannot be inspected; "
            f"put {family.entry_point} in command, or declare {FORWARDING_DECLARATION} only if the image ENTRYPOINT "
            "forwards appended arguments to the engine",
            "",
            "command",
        )
    found = _resolve_program(args)
    if found.kind is _Kind.SHELL:
        refusal, reason = _launch_reason(found, family)
        return _refused(refusal, reason, found.program, "args")
    return LaunchVerdict(
        True,
        "",
        f"{ANNOTATION_FORWARDED} declares that the image ENTRYPOINT forwards appended arguments",
        args_forwarded=True,
        append_to="args",
    )


def parse_launch(command: list[str] | None, args: list[str] | None, engine: str, forwarded: bool) -> LaunchVerdict:
    """Judge a container's launch for the declared engine (``vLLM``/``vllm``/``vllm-ascend`` or ``SGLang``/``sglang``).

    Kubernetes semantics: ``command`` replaces the image ENTRYPOINT and ``args`` its CMD, so with only ``args`` the
    program receiving them is the image's unknown ENTRYPOINT.
    """
    family = family_of(engine)
    command, args = list(command or []), list(args or [])
    if family is None:
        reason = f"engine {json.dumps(engine)} is not supported; declare vLLM or SGLang"
        return _refused(LaunchRefusal.UNSUPPORTED_ENGINE, reason, "", "command")
    if not command and not args:
        return _refused(
            LaunchRefusal.NO_COMMAND,
            "the container declares neither command nor args, so an appended argument would replace the image's CMD "
            f"instead of adding to it; put {family.entry_point} in command and the image's launch arguments in args",
            "",
            "command",
        )
    if not command:
        return _judge_args_only(args, family, forwarded)
    return _judge_found(_resolve_program([*command, *args]), family, forwarded, "args" if args else "command")

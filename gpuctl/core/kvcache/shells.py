"""Shells: which programs are shells, and whether a shell's own options make it run a script or read its commands
from a string or stdin (a command mode).

A shell is recognised by a rule, not a list of spellings: its base name is a shell family name followed, optionally, by
a version (``bash5``, ``bash-5.2``, ``zsh-5.9``, ``ksh93``) and a ``-static`` build suffix. Each family reads its options
with its own grammar. Where the real shells of a family, or the shells a name may stand for (``sh`` is bash, dash or ash
depending on the image), read an option differently, the reading that can reach a command mode is chosen: no spelling a
real shell reads as a command mode is read here as a script.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from gpuctl.core.compat import StrEnum


@dataclass(frozen=True, slots=True)
class ShellGrammar:
    """How a shell family reads its options, up to its first operand (the script)."""

    command: str = "c"
    """Short options that make the shell read its commands from the next argument."""
    stdin: str = "s"
    """Short options that make the shell read its commands from stdin, the operands becoming positional parameters."""
    valued: str = "o"
    """Short options that take a value."""
    value_in_cluster: bool = False
    """getopt: a valued option takes the rest of its cluster as its value when there is one (Bourne shells instead
    take the next argument for each valued option of a cluster)."""
    plus_options: bool = True
    """``+x`` clusters are options too (Bourne shells); elsewhere ``+x`` is an operand."""
    long_command: frozenset[str] = frozenset()
    long_stdin: frozenset[str] = frozenset()
    long_valued: frozenset[str] = frozenset()
    long_flags: frozenset[str] = frozenset()
    long_abbreviated: bool = False
    """getopt_long: an unambiguous prefix of a long option is that option."""
    single_dash_long: frozenset[str] = frozenset()
    """Long options also spelled with one dash (bash reads ``-login`` as ``--login``)."""
    stdin_settings: frozenset[str] = frozenset()
    """Option names (normalised: lower case, no ``_`` or ``-``) that, set with ``-o NAME`` or ``--NAME``, make the shell
    read its commands from stdin (zsh's ``SHIN_STDIN``)."""
    end_of_options: frozenset[str] = frozenset({"--", "-"})

    def long_names(self) -> frozenset[str]:
        return self.long_command | self.long_stdin | self.long_valued | self.long_flags


BASH_LONG_OPTIONS: Final = frozenset(
    {
        "debug",
        "debugger",
        "dump-po-strings",
        "dump-strings",
        "help",
        "init-file",
        "login",
        "noediting",
        "noprofile",
        "norc",
        "posix",
        "pretty-print",
        "protected",
        "rcfile",
        "restricted",
        "verbose",
        "version",
        "wordexp",
    }
)
# The Bourne family shares one reading of the options that take a value: bash's ``-O NAME`` and ``--rcfile``/
# ``--init-file FILE`` take one in every member. Where a member rejects such an option, reading it as valued can only
# move the reading towards a command mode: the argument it skips would have been the script that ends the options, and
# an argument that is itself a command-mode option is read as one.
BOURNE_LONG_VALUED: Final = frozenset({"--rcfile", "--init-file"})
BOURNE: Final = ShellGrammar(valued="oO", long_valued=BOURNE_LONG_VALUED)
BASH: Final = ShellGrammar(
    valued="oO",
    long_valued=BOURNE_LONG_VALUED,
    long_flags=frozenset(f"--{name}" for name in BASH_LONG_OPTIONS) - BOURNE_LONG_VALUED,
    single_dash_long=BASH_LONG_OPTIONS,
)
POSIX_SH: Final = ShellGrammar(valued="oO", long_valued=BOURNE_LONG_VALUED, long_flags=BASH.long_flags)
"""``sh``: bash, dash, ash or another Bourne shell depending on the image. Bash's options are read, but not its one-dash
long spellings: in dash or mksh ``-norc`` is the cluster ``-n -o … -r -c``."""
ZSH: Final = ShellGrammar(
    valued="oO",
    long_valued=BOURNE_LONG_VALUED | {"--emulate"},
    stdin_settings=frozenset({"shinstdin"}),
)
KSH93: Final = ShellGrammar(valued="oOR", long_valued=BOURNE_LONG_VALUED)
MKSH: Final = ShellGrammar(valued="oOT", long_valued=BOURNE_LONG_VALUED)
YASH: Final = ShellGrammar(
    valued="oO",
    long_command=frozenset({"--cmdline"}),
    long_stdin=frozenset({"--stdin"}),
    long_valued=BOURNE_LONG_VALUED | {"--profile"},
    long_flags=frozenset(
        {"--interactive", "--login", "--noprofile", "--norcfile", "--posix", "--version", "--help", "--verbose"}
    ),
    long_abbreviated=True,
)
CSH: Final = ShellGrammar(valued="", plus_options=False, end_of_options=frozenset({"--", "-", "-b"}))
FISH: Final = ShellGrammar(
    stdin="",
    valued="CdDfop",
    value_in_cluster=True,
    plus_options=False,
    long_command=frozenset({"--command"}),
    long_valued=frozenset(
        {
            "--init-command",
            "--debug",
            "--debug-output",
            "--debug-stack-frames",
            "--features",
            "--profile",
            "--profile-startup",
        }
    ),
    long_flags=frozenset(
        {
            "--interactive",
            "--login",
            "--no-config",
            "--no-execute",
            "--private",
            "--print-rusage-self",
            "--print-debug-categories",
            "--help",
            "--version",
        }
    ),
    long_abbreviated=True,
    end_of_options=frozenset({"--"}),
)

SHELL_FAMILIES: Final[Mapping[str, ShellGrammar]] = {
    "sh": POSIX_SH,
    "bash": BASH,
    "rbash": BASH,
    "dash": BOURNE,
    "ash": BOURNE,
    "posh": BOURNE,
    "yash": YASH,
    "zsh": ZSH,
    "ksh": KSH93,
    "mksh": MKSH,
    "lksh": MKSH,
    "pdksh": BOURNE,
    "oksh": BOURNE,
    "csh": CSH,
    "tcsh": CSH,
    "fish": FISH,
}
"""Every shell family by its base name; a versioned or static build of one is the same family."""

SHELL_NAME: Final = re.compile(
    rf"(?P<family>{'|'.join(sorted(SHELL_FAMILIES, key=len, reverse=True))})"
    r"(?:[-_]?\d+(?:\.\d+)*)?"
    r"(?:[-.]static)?"
)


def shell_grammar(name: str) -> ShellGrammar | None:
    """The option grammar of the shell a base name runs (``bash``, ``/bin/sh`` read as ``sh``, ``bash-5.2``,
    ``ksh93``), or None when the name is not a shell."""
    matched = SHELL_NAME.fullmatch(name)
    return SHELL_FAMILIES[matched.group("family")] if matched else None


class ShellMode(StrEnum):
    COMMAND = "command"
    """Commands are read from a string or from stdin: the operands become positional parameters."""
    SCRIPT = "script"
    """The first operand is a script the shell runs."""
    NOTHING = "nothing"
    """No operand after the options."""


@dataclass(frozen=True, slots=True)
class ShellLaunch:
    mode: ShellMode
    selector: str = ""
    """For a command mode, the option that selects it as written (``-c``, ``-lc``, ``+c``, ``--command``,
    ``-o shinstdin``)."""
    script: int = -1
    """For a script, the index of its argument."""


def _setting(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def _long_option(grammar: ShellGrammar, name: str) -> str:
    """The long option a ``--name`` spelling stands for: itself, or the one long option it abbreviates."""
    known = grammar.long_names()
    if name in known or not grammar.long_abbreviated:
        return name
    candidates = [option for option in known if option.startswith(name)]
    return candidates[0] if len(candidates) == 1 else name


def _selects_command_mode(grammar: ShellGrammar, name: str) -> bool:
    modes = grammar.long_command | grammar.long_stdin
    if name in modes:
        return True
    abbreviates = grammar.long_abbreviated and len(name) > 2 and any(m.startswith(name) for m in modes)
    return abbreviates or _setting(name[2:]) in grammar.stdin_settings


def _enters_command_mode(grammar: ShellGrammar, token: str) -> bool:
    """A word that, read as an option, selects a command mode (what a valued option should never be given)."""
    if token.startswith("--"):
        return _selects_command_mode(grammar, token.partition("=")[0])
    if len(token) < 2 or token[0] not in "-+":
        return False
    return any(char in grammar.command + grammar.stdin for char in token[1:])


def _read_long(grammar: ShellGrammar, token: str, argv: Sequence[str], j: int) -> ShellLaunch | int:
    """A long option: the command mode it selects, or how many arguments it occupies."""
    written, eq, _ = token.partition("=")
    name = _long_option(grammar, written)
    if _selects_command_mode(grammar, written) or _selects_command_mode(grammar, name):
        return ShellLaunch(ShellMode.COMMAND, written)
    if name in grammar.long_valued and not eq:
        if j + 1 < len(argv) and _enters_command_mode(grammar, argv[j + 1]):
            return ShellLaunch(ShellMode.COMMAND, argv[j + 1])
        return 2
    return 1


def _read_cluster(grammar: ShellGrammar, token: str, argv: Sequence[str], j: int) -> ShellLaunch | int:
    """A ``-xyz`` (or ``+xyz``) cluster: the command mode it selects, or how many arguments it occupies."""
    modes = grammar.command + grammar.stdin
    values = 0
    for pos, char in enumerate(token[1:], 1):
        if char in modes:
            return ShellLaunch(ShellMode.COMMAND, token)
        if char in grammar.valued:
            if grammar.value_in_cluster:
                if pos < len(token) - 1:
                    return 1
                values = 1
                break
            values += 1
    for value in argv[j + 1 : j + 1 + values]:
        if _enters_command_mode(grammar, value):
            return ShellLaunch(ShellMode.COMMAND, value)
        if token[0] == "-" and _setting(value) in grammar.stdin_settings:
            return ShellLaunch(ShellMode.COMMAND, f"{token} {value}")
    return 1 + values


def read_shell(grammar: ShellGrammar, argv: Sequence[str], i: int) -> ShellLaunch:
    """How the shell at ``argv[i]`` is launched: in a command mode, with a script, or with nothing."""
    j = i + 1
    while j < len(argv):
        token = argv[j]
        if token in grammar.end_of_options:
            j += 1
            break
        step: ShellLaunch | int
        if token.startswith("--"):
            step = _read_long(grammar, token, argv, j)
        elif token.startswith("-") and token[1:] in grammar.single_dash_long:
            step = _read_long(grammar, "-" + token, argv, j)
        elif len(token) > 1 and (token[0] == "-" or (token[0] == "+" and grammar.plus_options)):
            step = _read_cluster(grammar, token, argv, j)
        else:
            break
        if isinstance(step, ShellLaunch):
            return step
        j += step
    if j >= len(argv):
        return ShellLaunch(ShellMode.NOTHING)
    return ShellLaunch(ShellMode.SCRIPT, script=j)

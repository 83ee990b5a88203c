"""``gpuctl completion bash|zsh|fish``: the shell completion script; and the generated files shipped in the repo."""

import os
from enum import StrEnum
from typing import Annotated

import typer

PROG = "gpuctl"
COMPLETE_VAR = "_GPUCTL_COMPLETE"
PLUGIN_COMPLETE_VAR = "_KUBECTL_GPUCTL_COMPLETE"
PLUGIN_SHIM = """#!/usr/bin/env bash
# kubectl's completion for the plugin `kubectl gpuctl`: kubectl runs this file (found on PATH as
# kubectl_complete-gpuctl) with `__complete ARGS... WORD` and reads one candidate a line, then `:<directive>`.
[ "$1" = "__complete" ] && shift
words=("gpuctl" "$@")
COMP_WORDS="${words[*]}" COMP_CWORD=$(( ${#words[@]} - 1 )) _GPUCTL_COMPLETE=complete_bash gpuctl
echo ":4"
"""


class Shell(StrEnum):
    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"


def completion_requested() -> bool:
    return COMPLETE_VAR in os.environ or PLUGIN_COMPLETE_VAR in os.environ


def enable_completion() -> None:
    """Register the shell protocols the scripts speak (only when a shell asks for completions)."""
    from typer._completion_classes import completion_init

    completion_init()


def script(shell: Shell, prog: str = PROG) -> str:
    from typer._completion_shared import get_completion_script

    var = PLUGIN_COMPLETE_VAR if prog == "kubectl-gpuctl" else COMPLETE_VAR
    return get_completion_script(prog_name=prog, complete_var=var, shell=shell.value) + "\n"


def completion_command(
    shell: Annotated[Shell, typer.Argument(help="The shell to complete in.")],
) -> None:
    """Print the completion script for a shell.

    bash: source <(gpuctl completion bash); zsh: gpuctl completion zsh > "${fpath[1]}/_gpuctl";
    fish: gpuctl completion fish > ~/.config/fish/completions/gpuctl.fish
    """
    typer.echo(script(shell), nl=False)

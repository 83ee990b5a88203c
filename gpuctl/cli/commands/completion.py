"""``gpuctl completion bash|zsh|fish``: the shell completion scripts (and kubectl's shim for the plugin). The names
the scripts complete come from :mod:`gpuctl.cli.names`.
"""

from typing import Annotated

import typer

from gpuctl.cli.registry import command
from gpuctl.cli.shells import COMPLETE_VAR, PLUGIN_COMPLETE_VAR
from gpuctl.core.compat import StrEnum

PROG = "gpuctl"
PLUGIN_SHIM = """#!/usr/bin/env bash
# kubectl's completion for the plugin `kubectl gpuctl`: kubectl runs this file (found on PATH as
# kubectl_complete-gpuctl) with `__complete ARGS... WORD` and reads one candidate a line, then `:<directive>`.
# It asks the plugin itself: kubectl-gpuctl beside this file (a krew install), else on PATH.
[ "$1" = "__complete" ] && shift
here=$(dirname "$(readlink -f "$0")")
plugin="$here/kubectl-gpuctl"
[ -x "$plugin" ] || plugin=kubectl-gpuctl
words=("gpuctl" "$@")
COMP_WORDS="${words[*]}" COMP_CWORD=$(( ${#words[@]} - 1 )) _GPUCTL_COMPLETE=complete_bash "$plugin"
echo ":4"
"""


class Shell(StrEnum):
    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"


def script(shell: Shell, prog: str = PROG) -> str:
    from gpuctl.cli.vendored import get_completion_script

    var = PLUGIN_COMPLETE_VAR if prog == "kubectl-gpuctl" else COMPLETE_VAR
    return get_completion_script(prog_name=prog, complete_var=var, shell=shell.value) + "\n"


@command(
    "completion",
    summary="Print a shell completion script.",
    examples="""
  source <(gpuctl completion bash)
  gpuctl completion zsh > "${fpath[1]}/_gpuctl"
  gpuctl completion fish > ~/.config/fish/completions/gpuctl.fish""",
    listed=110,
)
def completion_command(
    shell: Annotated[Shell, typer.Argument(help="The shell to complete in.")],
) -> None:
    """Print the completion script for a shell.

    bash: source <(gpuctl completion bash); zsh: gpuctl completion zsh > "${fpath[1]}/_gpuctl";
    fish: gpuctl completion fish > ~/.config/fish/completions/gpuctl.fish
    """
    typer.echo(script(shell), nl=False)

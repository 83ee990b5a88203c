"""How a shell and kubectl call gpuctl: the program name usage reads, and the variable each completion script sets.

Read at start-up, so it imports nothing but ``os``.
"""

from __future__ import annotations

import os

COMPLETE_VAR = "_GPUCTL_COMPLETE"
"""Set by ``gpuctl``'s completion scripts (and by kubectl's plugin completion, through ``kubectl_complete-gpuctl``)."""
PLUGIN_COMPLETE_VAR = "_KUBECTL_GPUCTL_COMPLETE"
"""Set by the completion script of the ``kubectl-gpuctl`` program."""


def prog_name(argv0: str) -> str:
    """As the kubectl plugin, usage reads the way the user typed it."""
    return "kubectl gpuctl" if os.path.basename(argv0) == "kubectl-gpuctl" else "gpuctl"


def complete_var(env: os._Environ[str] | dict[str, str]) -> str | None:
    """The completion variable a shell set, or None when no shell asks for completions."""
    if PLUGIN_COMPLETE_VAR in env:
        return PLUGIN_COMPLETE_VAR
    return COMPLETE_VAR if COMPLETE_VAR in env else None

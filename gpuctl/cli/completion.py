"""``gpuctl completion bash|zsh|fish``: the shell completion scripts, and the completion of names (InstanceTypes,
Workloads, Instances, namespaces, contexts, profiles) from the cluster or the snapshot the command line names so far.
"""

import contextlib
import os
from typing import Annotated, Any

import typer

from gpuctl.cli.startup import COMPLETE_VAR, PLUGIN_COMPLETE_VAR
from gpuctl.core.compat import StrEnum

COMPLETION_TIMEOUT = "2s"
"""An API call made to complete a name may take this long: a slow cluster gives no candidates, never a hang."""

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


# ----------------------------------------------------------------------------------------------- names


def _param(ctx: Any, name: str) -> Any:
    """A flag's value as parsed so far, on this command or before the subcommand."""
    while ctx is not None:
        value = (ctx.params or {}).get(name)
        if value:
            return value
        ctx = ctx.parent
    return None


def _source(ctx: Any) -> Any:
    from gpuctl.cli.options import SourceSpec

    snapshot = _param(ctx, "snapshot") or os.environ.get("GPUCTL_SNAPSHOT")
    contexts = _param(ctx, "context")
    return SourceSpec(
        snapshot=snapshot,
        kubeconfig=_param(ctx, "kubeconfig"),
        context=contexts[-1] if isinstance(contexts, list | tuple) and contexts else contexts or None,
        cluster=_param(ctx, "cluster"),
        user=_param(ctx, "user"),
        server=_param(ctx, "server"),
        token=_param(ctx, "token"),
        request_timeout=COMPLETION_TIMEOUT,
        namespace=_param(ctx, "namespace"),
    )


def _names(ctx: Any, kind: str) -> list[str]:
    from gpuctl.cluster import kinds, kubeconfig, read

    spec = _source(ctx)
    if kind == "context":
        return sorted(kubeconfig.load(spec.kubeconfig).contexts)
    source = spec.open()
    if kind == "instancetype":
        return [read.name_of(o) for o in source.list(kinds.INSTANCETYPE)]
    if kind == "profile":
        return sorted({p.name for t in read.instancetypes(source) for p in t.offered_profiles})
    if kind == "namespace":
        objs = source.list(kinds.NAMESPACE) if not spec.snapshot else []
        found = {read.name_of(o) for o in objs}
        for k in (kinds.WORKLOAD, kinds.INSTANCE, kinds.POD):
            if spec.snapshot:
                found |= {str((o.get("metadata") or {}).get("namespace") or "default") for o in source.list(k)}
        return sorted(found)
    target = {"workload": kinds.WORKLOAD, "instance": kinds.INSTANCE, "pod": kinds.POD}[kind]
    namespace = spec.namespace
    out = []
    for o in source.list(target, namespace=namespace):
        meta = o.get("metadata") or {}
        name = str(meta.get("name", ""))
        out.append(name if namespace else f"{meta.get('namespace') or 'default'}/{name}")
    return sorted(out)


def complete_names(ctx: Any, kind: str, incomplete: str) -> list[str]:
    """Candidates for a name being typed; none (never an error or a hang) when they cannot be read. What was read
    is kept (:mod:`gpuctl.cli.namecache`) for the start-up table to answer the next TAB with."""
    try:
        names = _names(ctx, kind)
    except Exception:  # noqa: BLE001 - completion must never break the shell
        return []
    _remember(ctx, kind, names)
    return [n for n in names if n.startswith(incomplete)]


def _remember(ctx: Any, kind: str, names: list[str]) -> None:
    from gpuctl.cli import namecache

    spec = _source(ctx)
    values = {name: getattr(spec, name) for name in (*namecache.CONNECTION, "snapshot", "token", "namespace")}
    ident = namecache.identity(kind, values, os.environ)
    if ident is not None:
        namecache.write(ident[0], names, os.environ)


def complete_instancetypes(ctx: typer.Context, incomplete: str) -> list[str]:
    return complete_names(ctx, "instancetype", incomplete)


def complete_workloads(ctx: typer.Context, incomplete: str) -> list[str]:
    return complete_names(ctx, "workload", incomplete)


def complete_instances(ctx: typer.Context, incomplete: str) -> list[str]:
    return complete_names(ctx, "instance", incomplete)


def complete_pods(ctx: typer.Context, incomplete: str) -> list[str]:
    return complete_names(ctx, "pod", incomplete)


def complete_profiles(ctx: typer.Context, incomplete: str) -> list[str]:
    return complete_names(ctx, "profile", incomplete)


def plugin_complete() -> None:
    """The ``kubectl_complete-gpuctl`` entry point ``pip install`` puts on PATH: kubectl runs it with
    ``__complete ARGS... WORD``; it completes in this process (no ``gpuctl`` on PATH needed), one candidate a line,
    then kubectl's directive (``:4``, no file completion)."""
    import sys

    args = sys.argv[1:]
    if args[:1] == ["__complete"]:
        args = args[1:]
    words = ["gpuctl", *args]
    os.environ["COMP_WORDS"] = " ".join(words)
    os.environ["COMP_CWORD"] = str(len(words) - 1)
    os.environ[COMPLETE_VAR] = "complete_bash"
    from gpuctl.cli.startup import run

    with contextlib.suppress(SystemExit):  # click ends a completion by exiting
        run()
    sys.stdout.write(":4\n")

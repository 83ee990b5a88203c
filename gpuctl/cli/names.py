"""The completion of names a command line is typing — InstanceTypes, Workloads, Instances, Pods, namespaces,
contexts, profiles — read from the cluster or the snapshot the words so far name, with a short timeout: a slow
cluster gives no candidates, never a hang or an error in the shell.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import typer

from gpuctl.cli.source import SourceSpec

COMPLETION_TIMEOUT = "2s"
"""An API call made to complete a name may take this long: a slow cluster gives no candidates, never a hang."""


def _param(ctx: Any, name: str) -> Any:
    """A flag's value as parsed so far, on this command or before the subcommand."""
    while ctx is not None:
        value = (ctx.params or {}).get(name)
        if value:
            return value
        ctx = ctx.parent
    return None


def _source(ctx: Any) -> SourceSpec:
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
    if kind == "node":
        return sorted({read.name_of(o) for k in (kinds.NODE, kinds.DEVICES) for o in source.list(k)})
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


def complete_nodes(ctx: typer.Context, incomplete: str) -> list[str]:
    return complete_names(ctx, "node", incomplete)


def completer(kind: str) -> Callable[[typer.Context, str], list[str]]:
    """The completion callback of an option or argument naming objects of ``kind``."""

    def complete(ctx: typer.Context, incomplete: str) -> list[str]:
        return complete_names(ctx, kind, incomplete)

    return complete

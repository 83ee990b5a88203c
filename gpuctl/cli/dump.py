"""``gpuctl dump DIR``: write every object gpuctl reads into a snapshot directory (never Secrets)."""

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from gpuctl.cluster.kinds import Kind

from gpuctl.cli.errors import UsageError, user_errors
from gpuctl.cli.options import ContextOption, KubeconfigOption, NamespaceOption, TimeoutOption, open_source

OPTIONAL_GROUPS = ("kvcache.gpustack.ai", "kueue.x-k8s.io", "worker.gpustack.ai")


def dumped_kinds() -> tuple["Kind", ...]:
    """Every kind a dump writes (Secrets never)."""
    from gpuctl.cluster import kinds

    return (
        kinds.NODE,
        kinds.POD,
        kinds.DEVICES,
        kinds.INSTANCETYPE,
        kinds.INSTANCE,
        kinds.RESOURCEFLAVOR,
        kinds.CLUSTERQUEUE,
        kinds.LOCALQUEUE,
        kinds.WORKLOAD,
        kinds.ADMISSIONCHECK,
        kinds.TOPOLOGY,
        kinds.KVCACHE_BINDING,
        kinds.KVCACHE_POOL,
        kinds.KVCACHE_BACKEND,
    )


def keep_pod(pod: dict[str, Any]) -> bool:
    """Pods the gates concern: those asking for an accelerator, and those Kueue manages."""
    from gpuctl.core import naming

    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if (
        naming.LABEL_QUEUE_NAME in labels
        or naming.LABEL_PODSET in labels
        or naming.ANNOTATION_WORKLOAD in annotations
        or naming.ANNOTATION_ALLOCATED in annotations
    ):
        return True
    spec = pod.get("spec") or {}
    for section in ("initContainers", "containers"):
        for c in spec.get(section) or []:
            res = (c or {}).get("resources") or {}
            for name in list(res.get("limits") or {}) + list(res.get("requests") or {}):
                if naming.classify_resource(str(name)) is not None:
                    return True
    return False


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop ``managedFields``: bookkeeping no gate reads, often the larger half of an object."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def write_atomically(path: Path, text: str) -> None:
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@user_errors
def dump_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write the snapshot (created if missing).")],
    namespace: NamespaceOption = None,
    fmt: Annotated[str, typer.Option("--format", help="json (fast to read back) or yaml.")] = "json",
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    request_timeout: TimeoutOption = None,
) -> None:
    """Write the objects every gpuctl command reads, one file per kind, in the snapshot format.

    Namespaced kinds are read from one namespace with -n, from all otherwise. Secrets are never read.
    """
    from gpuctl.cluster.errors import SourceError
    from gpuctl.cluster.live import LiveSource

    if fmt not in ("json", "yaml"):
        raise UsageError(f"--format {fmt!r}: use json or yaml")
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} exists and is not a directory")
    source = open_source(None, kubeconfig, context, request_timeout)
    assert isinstance(source, LiveSource)
    directory.mkdir(parents=True, exist_ok=True)
    from rich.progress import BarColumn, Progress, TextColumn

    written: list[str] = []
    skipped: list[str] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} kinds"),
        transient=True,
        console=_stderr_console(),
    ) as progress:
        dumped = dumped_kinds()
        task = progress.add_task("dumping", total=len(dumped))
        for kind in dumped:
            progress.update(task, description=f"reading {kind.plural}")
            try:
                objs = source.list(kind, namespace=namespace if kind.namespaced else None)
            except SourceError as exc:
                if kind.group in OPTIONAL_GROUPS and "is not served" in str(exc):
                    skipped.append(f"{kind.plural}: not served")
                    progress.advance(task)
                    continue
                raise
            if kind.kind == "Pod":
                objs = [o for o in objs if keep_pod(o)]
            items = [slim(o) for o in objs]
            doc = {"apiVersion": "v1", "kind": "List", "items": items}
            path = directory / f"{kind.plural}.{fmt}"
            if fmt == "json":
                text = json.dumps(doc, separators=(",", ":")) + "\n"
            else:
                import yaml

                text = yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)
            write_atomically(path, text)
            written.append(f"{path.name}: {len(items)}")
            progress.advance(task)
    sys.stderr.write(f"wrote {directory}: " + ", ".join(written) + "\n")
    if skipped:
        sys.stderr.write("skipped " + ", ".join(skipped) + "\n")


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(file=sys.stderr, no_color=bool(os.environ.get("NO_COLOR")))

"""``gpuctl dump DIR``: write every object gpuctl reads into a snapshot directory (never Secrets)."""

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from gpuctl.cluster.kinds import Kind

from gpuctl.cli.errors import UsageError
from gpuctl.cli.options import SourceSpec, source_options

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
        kinds.WORKLOAD_PRIORITY_CLASS,
        kinds.PRIORITY_CLASS,
        kinds.MUTATING_WEBHOOKS,
        kinds.VALIDATING_WEBHOOKS,
        kinds.KVCACHE_BINDING,
        kinds.KVCACHE_POOL,
        kinds.KVCACHE_BACKEND,
    )


def dumped_objects() -> tuple[tuple["Kind", str, str], ...]:
    """Single objects a dump adds, by kind, namespace and name: what ``doctor`` reads of the deployment."""
    from gpuctl.cluster import kinds
    from gpuctl.core import naming

    return (
        (kinds.CONFIGMAP, naming.KUEUE_NAMESPACE, naming.KUEUE_CONFIGMAP),
        (kinds.DEPLOYMENT, naming.KUEUE_NAMESPACE, naming.KUEUE_DEPLOYMENT),
        (kinds.DEPLOYMENT, naming.OPERATOR_NAMESPACE, naming.OPERATOR_NAME),
        (kinds.LEASE, naming.OPERATOR_NAMESPACE, naming.OPERATOR_NAME),
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


KEPT_FIELDS = {"Instance": "f:stop", "InstanceType": "f:inactive"}
"""Per kind, the ``spec`` field whose ``managedFields`` entries a dump keeps: doctor tells a drain's stop from a
user's by who set it, and how long a pool has been inactive by when."""


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop ``managedFields``: bookkeeping no gate reads, often the larger half of an object. The entries naming who
    set an Instance's ``spec.stop`` and when an InstanceType's ``spec.inactive`` was set are kept (manager, time
    and that field only)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        kept = {k: v for k, v in meta.items() if k != "managedFields"}
        field = KEPT_FIELDS.get(str(obj.get("kind")))
        if field is not None:
            entries: list[dict[str, Any]] = [
                {
                    "manager": e.get("manager"),
                    **({"time": e["time"]} if e.get("time") else {}),
                    "fieldsV1": {"f:spec": {field: {}}},
                }
                for e in meta["managedFields"] or []
                if isinstance(e, dict) and field in ((e.get("fieldsV1") or {}).get("f:spec") or {})
            ]
            if entries:
                kept["managedFields"] = entries
        obj = {**obj, "metadata": kept}
    return obj


REDACTED = "<redacted>"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_CREDENTIAL = re.compile(
    r"(?i)(password|passwd|pwd|token|secret|api[-_]?key|access[-_]?key|private[-_]?key|credentials?|auth)"
)


def _redact_args(args: list[Any]) -> list[Any]:
    """``--token=abc`` → ``--token=<redacted>``; ``--password abc`` → ``--password <redacted>``."""
    out: list[Any] = []
    hide_next = False
    for arg in args:
        if hide_next and isinstance(arg, str):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if isinstance(arg, str) and _CREDENTIAL.search(arg):
            name, sep, _ = arg.partition("=")
            if sep:
                out.append(f"{name}={REDACTED}")
                continue
            hide_next = arg.startswith("-")
        out.append(arg)
    return out


def redact(value: Any) -> Any:
    """A copy with inline environment values, credential-looking arguments and the last-applied configuration
    replaced: a dump gets attached to tickets."""
    if isinstance(value, list):
        return [redact(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k == "env" and isinstance(v, list):
            out[k] = [
                {**e, "value": REDACTED} if isinstance(e, dict) and isinstance(e.get("value"), str) else redact(e)
                for e in v
            ]
        elif k in ("args", "command") and isinstance(v, list):
            out[k] = _redact_args(v)
        elif k == "annotations" and isinstance(v, dict) and LAST_APPLIED in v:
            out[k] = {a: (REDACTED if a == LAST_APPLIED else b) for a, b in v.items()}
        else:
            out[k] = redact(v)
    return out


def write_private(path: Path, text: str) -> None:
    """A file only its owner reads (0600), written whole."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


@source_options(namespace=True)
def dump_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write the snapshot (created if missing).")],
    fmt: Annotated[str, typer.Option("--format", help="json (fast to read back) or yaml.")] = "json",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing dump in DIR as a whole.")] = False,
    no_redact: Annotated[
        bool,
        typer.Option(
            "--no-redact",
            help="Keep inline env values, credential-looking arguments and last-applied configurations.",
        ),
    ] = False,
    *,
    source: SourceSpec,
) -> None:
    """Write the objects every gpuctl command reads, one file per kind, in the snapshot format.

    Namespaced kinds are read from one namespace with -n, from all otherwise. Secrets are never read; inline env
    values, credential-looking arguments and last-applied configurations are redacted unless --no-redact. The files
    are readable by their owner only (0600, in a 0700 directory). DIR must be empty or new; --overwrite replaces a
    previous dump whole, and nothing is left half-written if reading fails.
    """
    import shutil
    import tempfile

    from gpuctl.cluster.errors import SourceError

    if fmt not in ("json", "yaml"):
        raise UsageError(f"--format {fmt!r}: use json or yaml")
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} exists and is not a directory")
    if directory.is_dir() and any(directory.iterdir()) and not overwrite:
        raise UsageError(f"{directory} is not empty: pass --overwrite to replace the dump in it")
    live = source.live()
    namespace = source.namespace
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))  # created 0700
    from rich.progress import BarColumn, Progress, TextColumn

    written: list[str] = []
    skipped: list[str] = []
    taken = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
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
                    objs = live.list(kind, namespace=namespace if kind.namespaced else None)
                except SourceError as exc:
                    if kind.group in OPTIONAL_GROUPS and "is not served" in str(exc):
                        skipped.append(f"{kind.plural}: not served")
                        progress.advance(task)
                        continue
                    raise
                if kind.kind == "Pod":
                    objs = [o for o in objs if keep_pod(o)]
                written.append(_write_list(staging / f"{kind.plural}.{fmt}", objs, fmt, no_redact))
                progress.advance(task)
            found = []
            for kind, ns, name in dumped_objects():
                try:
                    obj = live.get(kind, name, ns)
                except SourceError as exc:
                    skipped.append(f"{kind.plural} {ns}/{name}: {exc}")
                    continue
                if obj is not None:
                    found.append(obj)
            written.append(_write_list(staging / f"deployment.{fmt}", found, fmt, no_redact))
            written.append(_write_list(staging / f"dump.{fmt}", [dump_record(taken, live.describe())], fmt, True))
        if directory.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old.", dir=directory.parent))
            os.rename(directory, retired / directory.name)
            os.rename(staging, directory)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.rename(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    sys.stderr.write(f"wrote {directory}: " + ", ".join(written) + "\n")
    if skipped:
        sys.stderr.write("skipped " + ", ".join(skipped) + "\n")


def dump_record(taken: str, source: str) -> dict[str, Any]:
    """The dump's own record: when it started reading (every age on the snapshot is measured from it) and from
    where."""
    from gpuctl.cluster import kinds

    return {
        "apiVersion": kinds.DUMP.api_version,
        "kind": kinds.DUMP.kind,
        "metadata": {"name": "dump", "creationTimestamp": taken},
        "source": source,
    }


def _write_list(path: Path, objs: list[dict[str, Any]], fmt: str, no_redact: bool) -> str:
    items = [slim(o) if no_redact else redact(slim(o)) for o in objs]
    doc = {"apiVersion": "v1", "kind": "List", "items": items}
    if fmt == "json":
        text = json.dumps(doc, separators=(",", ":")) + "\n"
    else:
        import yaml

        text = yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)
    write_private(path, text)
    return f"{path.name}: {len(items)}"


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(file=sys.stderr, no_color=bool(os.environ.get("NO_COLOR")))

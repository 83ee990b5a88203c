"""``gpuctl dump DIR``: write every object gpuctl reads into a snapshot directory (never Secrets)."""

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from gpuctl.cluster.kinds import Kind
    from gpuctl.cluster.prometheus import Prometheus
    from gpuctl.core.cardhours import Window
    from gpuctl.core.redaction import Redactor

from gpuctl.cli.errors import UsageError
from gpuctl.cli.registry import SourceFlags, command
from gpuctl.cli.source import SourceSpec

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
    from gpuctl.core import gpustack, naming

    return (
        (kinds.CONFIGMAP, naming.KUEUE_NAMESPACE, naming.KUEUE_CONFIGMAP),
        (kinds.DEPLOYMENT, naming.KUEUE_NAMESPACE, naming.KUEUE_DEPLOYMENT),
        (kinds.DEPLOYMENT, naming.OPERATOR_NAMESPACE, naming.OPERATOR_NAME),
        (kinds.LEASE, naming.OPERATOR_NAMESPACE, naming.OPERATOR_NAME),
        (kinds.LEASE, gpustack.WORKER_NAMESPACE, gpustack.WORKER_LEASE),
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


MANIFEST = ".gpuctl-dump.json"
"""The manifest a dump writes beside its files: what it wrote (names, sizes, SHA-256 digests). Hidden, so snapshot
readers skip it; ``--overwrite`` replaces only a directory it describes exactly."""
MANIFEST_KIND = "GpuctlDump"


def write_private(path: Path, data: bytes) -> None:
    """A file only its owner reads (0600), written whole and flushed to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def foreign_entry(directory: Path, shown: Path | None = None) -> str | None:
    """Why ``directory`` is not exactly a dump ``gpuctl dump`` wrote (naming the first entry that is not, under
    ``shown``, the path as the user gave it), or None when every entry in it is a file its manifest lists, unchanged."""
    shown = shown or directory
    manifest = directory / MANIFEST
    entries = sorted(p.name for p in directory.iterdir())
    try:
        data = json.loads(manifest.read_bytes()) if manifest.is_file() and not manifest.is_symlink() else None
    except (OSError, ValueError):
        data = None
    files = data.get("files") if isinstance(data, dict) and data.get("kind") == MANIFEST_KIND else None
    if not isinstance(files, list):
        first = next((e for e in entries if e != MANIFEST), MANIFEST)
        return f"{shown / first} is not part of a gpuctl dump ({shown} has no dump manifest {MANIFEST})"
    listed = {f.get("name"): f.get("sha256") for f in files if isinstance(f, dict)}
    for name in entries:
        if name == MANIFEST:
            continue
        path = directory / name
        if name not in listed or path.is_symlink() or not path.is_file():
            return f"{shown / name} is not part of the dump written there"
        if _sha256(path) != listed[name]:
            return f"{shown / name} changed since gpuctl dump wrote it"
    return None


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the system cannot."""
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    errno = ctypes.get_errno()
    if errno in (38, 22, 95):  # ENOSYS, EINVAL (the filesystem cannot), EOPNOTSUPP
        return False
    raise OSError(errno, os.strerror(errno), str(b))


@command(
    "dump",
    summary="Write a snapshot of the objects gpuctl reads.",
    examples="""
  # A snapshot to attach to a ticket (credentials redacted), then read offline
  gpuctl dump ./dump
  gpuctl views --snapshot ./dump

  # Replace an older dump of one namespace
  gpuctl dump ./dump -n team-a --overwrite""",
    listed=100,
    source=SourceFlags(namespace=True),
)
def dump_command(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write the snapshot (created if missing).")],
    fmt: Annotated[str, typer.Option("--format", help="json (fast to read back) or yaml.")] = "json",
    overwrite: Annotated[
        bool,
        typer.Option("--overwrite", help="Replace a previous dump in DIR, if DIR holds exactly that dump."),
    ] = False,
    no_redact: Annotated[
        bool,
        typer.Option(
            "--no-redact",
            help="Keep inline env values, credential-looking arguments, annotations and labels, and last-applied "
            "configurations.",
        ),
    ] = False,
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus", help="Also keep the series `usage --since` reads, from this Prometheus.", show_default=False
        ),
    ] = None,
    prometheus_service: Annotated[
        str | None,
        typer.Option(
            "--prometheus-service",
            help="As --prometheus, through the API server to NAMESPACE/NAME:PORT.",
            show_default=False,
        ),
    ] = None,
    since: Annotated[
        str, typer.Option("--since", help="With --prometheus: how far back the kept series reach.")
    ] = "30d",
    step: Annotated[str, typer.Option("--step", help="With --prometheus: the kept series' step.")] = "5m",
    idle_for: Annotated[
        str, typer.Option("--idle-for", help="With --prometheus: the longest --idle-for `usage` may ask of the dump.")
    ] = "30m",
    *,
    source: SourceSpec,
) -> None:
    """Write the objects every gpuctl command reads, one file per kind, in the snapshot format.

    Namespaced kinds are read from one namespace with -n, from all otherwise, and the newest 20,000 Events with
    them (what `explain workload --history` reads back). Secrets are never read; inline env
    values, credential-looking arguments, annotation and label values, and last-applied configurations are
    redacted unless --no-redact. The files are readable by their owner only (0600, in a 0700 directory), listed
    with their digests in DIR/.gpuctl-dump.json. DIR must be empty or new; --overwrite replaces a previous dump, and
    only a directory that holds exactly the files that dump wrote (anything else in it is refused, by name). The new
    dump is written beside DIR and swapped in whole: an interrupted dump leaves the old one as it was.
    """
    import shutil
    import tempfile

    from gpuctl.cluster.errors import SourceError
    from gpuctl.cluster.events import MAX_EVENTS, read_events
    from gpuctl.core.redaction import Redactor

    if fmt not in ("json", "yaml"):
        raise UsageError(f"--format {fmt!r}: use json or yaml")
    series_window = _series_window(prometheus, prometheus_service, since, step, idle_for)
    target = Path(os.path.abspath(directory))  # `.` has a name and a parent to write beside it in
    _check_target(target, overwrite, directory)
    live = source.live()
    namespace = source.namespace
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.gpuctl-dump-", dir=target.parent))  # 0700
    from rich.progress import BarColumn, Progress, TextColumn

    redactor = None if no_redact else Redactor()
    written: list[tuple[str, int]] = []
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
                written.append(_write_list(staging / f"{kind.plural}.{fmt}", objs, fmt, redactor))
                progress.advance(task)
            progress.update(task, description="reading events")
            try:
                events, left_out = read_events(live, namespace)
                written.append(_write_list(staging / f"events.{fmt}", events, fmt, redactor))
                if left_out:
                    skipped.append(f"the {left_out} oldest events (a dump keeps the newest {MAX_EVENTS})")
            except SourceError as exc:
                skipped.append(f"events: {exc}")  # histories will say their record is incomplete
            found = []
            for kind, ns, name in dumped_objects():
                try:
                    obj = live.get(kind, name, ns)
                except SourceError as exc:
                    skipped.append(f"{kind.plural} {ns}/{name}: {exc}")
                    continue
                if obj is not None:
                    found.append(obj)
            # GPUStack's worker, for the manufacturer settings the chart put on it (its name is the release's).
            from gpuctl.cluster import read
            from gpuctl.core import gpustack

            worker = read.worker_deployment(live, gpustack.WORKER_NAMESPACE)
            if worker is not None:
                found.append(worker)
            written.append(_write_list(staging / f"deployment.{fmt}", found, fmt, redactor))
            progress.update(task, description="reading versions")
            from gpuctl.cluster.versions import kubernetes_version, kueue_version
            from gpuctl.core.versions import version_text

            kubernetes, _ = kubernetes_version(live)
            record = dump_record(taken, live.describe(), version_text(kubernetes), kueue_version(live).to_dict())
            written.append(_write_list(staging / f"dump.{fmt}", [record], fmt, None))
            if series_window is not None:
                progress.update(task, description="reading Prometheus")
                kept_series = prometheus_series(_prometheus_of(prometheus, prometheus_service, source), series_window)
                written.append(_write_list(staging / f"prometheusseries.{fmt}", kept_series, fmt, None))
        _write_manifest(staging, redactor)
        kept = _swap_in(staging, target, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    summary = f"wrote {directory}: " + ", ".join(f"{name}: {n}" for name, n in written)
    if redactor is not None:
        summary += f"; redacted {redactor.count} value(s)"
        if redactor.where:
            summary += " (" + ", ".join(f"{rule} {n}" for rule, n in sorted(redactor.where.items())) + ")"
    sys.stderr.write(summary + "\n")
    if skipped:
        sys.stderr.write("skipped " + ", ".join(skipped) + "\n")
    if kept is not None:
        sys.stderr.write(f"warning: files appeared in the previous dump while this one was read: kept it at {kept}\n")


def dump_record(
    taken: str, source: str, kubernetes: str | None = None, kueue: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The dump's own record: when it started reading (every age on the snapshot is measured from it), from where,
    and the Kubernetes and Kueue versions it was taken from (what-ifs on the snapshot follow that Kueue)."""
    from gpuctl.cluster import kinds

    record: dict[str, Any] = {
        "apiVersion": kinds.DUMP.api_version,
        "kind": kinds.DUMP.kind,
        "metadata": {"name": "dump", "creationTimestamp": taken},
        "source": source,
    }
    if kubernetes is not None:
        record["kubernetesVersion"] = kubernetes
    if kueue is not None:
        record["kueueVersion"] = kueue
    return record


def _check_target(directory: Path, overwrite: bool, shown: Path) -> None:
    """Refuse a target that is not a new or empty directory, or, with --overwrite, exactly a previous dump."""
    if directory.is_symlink():
        raise UsageError(f"{shown} is a symbolic link: give the directory itself")
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{shown} exists and is not a directory")
    if not directory.is_dir() or not any(directory.iterdir()):
        return
    if not overwrite:
        raise UsageError(f"{shown} is not empty: pass --overwrite to replace the dump in it")
    why = foreign_entry(directory, shown)
    if why is not None:
        raise UsageError(
            f"{why}: --overwrite replaces only a directory that holds exactly a previous dump; move that file away "
            "or choose another DIR"
        )


def _write_manifest(staging: Path, redactor: "Redactor | None") -> None:
    from gpuctl import __version__

    files = [
        {"name": p.name, "bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(staging.iterdir())
        if p.name != MANIFEST
    ]
    manifest = {
        "kind": MANIFEST_KIND,
        "version": 1,
        "writer": f"gpuctl {__version__}",
        "redacted": None if redactor is None else redactor.count,
        "files": files,
    }
    write_private(staging / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())


def _swap_in(staging: Path, directory: Path, shown: Path) -> Path | None:
    """Put the finished dump at ``directory``: renamed there when it is new or empty, else swapped in one step with
    the previous dump, which is then removed — unless it gained files meanwhile, when it is kept (its path returned).
    """
    import shutil
    import tempfile

    if directory.is_dir() and not any(directory.iterdir()):
        # An empty directory stays (a shell may be in it): the files move in, the manifest last.
        for path in sorted(staging.iterdir(), key=lambda p: p.name == MANIFEST):
            os.rename(path, directory / path.name)
        os.chmod(directory, 0o700)
        return None
    if not directory.exists():
        os.rename(staging, directory)
        return None
    why = foreign_entry(directory, shown)
    if why is not None:  # changed since it was checked, while the cluster was read
        raise UsageError(f"{why}: --overwrite replaces only a directory that holds exactly a previous dump")
    if _exchange(staging, directory):
        old = staging  # the previous dump, now where the new one was written
    else:
        # Two renames: between them the previous dump is whole under `retired`.
        retired = Path(tempfile.mkdtemp(prefix=f".{directory.name}.gpuctl-old-", dir=directory.parent))
        old = retired / directory.name
        os.rename(directory, old)
        os.rename(staging, directory)
    if foreign_entry(old) is not None:
        kept = Path(tempfile.mkdtemp(prefix=f"{directory.name}.previous-", dir=directory.parent))
        os.rename(old, kept / directory.name)
        return kept / directory.name
    shutil.rmtree(old.parent if old.parent != directory.parent else old, ignore_errors=True)
    return None


def _write_list(path: Path, objs: list[dict[str, Any]], fmt: str, redactor: "Redactor | None") -> tuple[str, int]:
    items = [slim(o) if redactor is None else redactor.redact(slim(o)) for o in objs]
    doc = {"apiVersion": "v1", "kind": "List", "items": items}
    if fmt == "json":
        text = json.dumps(doc, separators=(",", ":")) + "\n"
    else:
        import yaml

        text = yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)
    write_private(path, text.encode())
    return path.name, len(items)


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(file=sys.stderr, no_color=bool(os.environ.get("NO_COLOR")))


def _series_window(
    prometheus: str | None, service: str | None, since: str, step: str, idle_for: str
) -> "Window | None":
    """The window of series a dump keeps, when it reads Prometheus: ``since`` up to now, the step grid, and the
    longest idle rule it must serve."""
    if prometheus is None and service is None:
        return None
    if prometheus is not None and service is not None:
        raise UsageError("give --prometheus or --prometheus-service, not both")
    from gpuctl.cli.source import parse_duration
    from gpuctl.core.cardhours import Window, align

    step_s = int(parse_duration(step, "--step"))
    return Window(
        align(time.time(), step_s) if step_s > 0 else 0,
        int(parse_duration(since, "--since")),
        step_s,
        int(parse_duration(idle_for, "--idle-for")),
        0.05,
    )


def _prometheus_of(prometheus: str | None, service: str | None, source: SourceSpec) -> "Prometheus":
    from gpuctl.cluster.prometheus import Prometheus, ServiceRef

    if service is not None:
        return Prometheus(service=ServiceRef.parse(service), live=source.live())
    return Prometheus(prometheus)


def prometheus_series(client: "Prometheus", w: "Window") -> list[dict[str, Any]]:
    """One ``PrometheusSeries`` object per figure :func:`gpuctl.core.cardhours.sampled_queries` names: its series on
    the window's grid, from ``idle_for`` before the window (what the idle rule looks back on) to its end."""
    from gpuctl.cluster import kinds
    from gpuctl.core.cardhours import sampled_queries

    start = w.until - w.seconds - w.idle_for
    out = []
    for name, expr in sampled_queries(w).items():
        series = client.query_range(expr, start, w.until, w.step, what=f"{name} series")
        out.append(
            {
                "apiVersion": kinds.PROMETHEUS_SERIES.api_version,
                "kind": kinds.PROMETHEUS_SERIES.kind,
                "metadata": {"name": name},
                "query": expr,
                "start": start,
                "end": w.until,
                "stepSeconds": w.step,
                "idleForSeconds": w.idle_for,
                "source": client.describe(),
                "series": [
                    {"metric": dict(s.labels), "values": [[t, v] for t, v in sorted(s.values.items())]} for s in series
                ],
            }
        )
    return out

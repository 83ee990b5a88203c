"""Where a command reads (and writes): a snapshot, or a cluster as kubectl's flags name it, in one record.

A command declared with connection flags receives one :class:`SourceSpec` (built by ``options.source_options``); it
opens a snapshot or the cluster, resolves the namespace it reads, and for a fleet command, each cluster to read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from gpuctl.cluster.live import LiveSource
    from gpuctl.cluster.read import Source

T = TypeVar("T")


def parse_duration(text: str, flag: str) -> float:
    """A number of seconds or a duration such as 500ms, 10s, 2m, 1h (and 30d), as kubectl reads its duration
    flags."""
    from gpuctl.cli.errors import UsageError

    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    t = text.strip()
    for suffix in ("ms", "s", "m", "h", "d"):
        if t.endswith(suffix):
            number, scale = t[: -len(suffix)], units[suffix]
            break
    else:
        number, scale = t, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise UsageError(f"{flag} {text!r}: use a duration such as 10s, 2m or 1h") from None
    if value < 0 or value != value:
        raise UsageError(f"{flag} {text!r}: a duration cannot be negative")
    return value


S = TypeVar("S", bound="Source")


def parse_timeout(text: str | None) -> float | None:
    """kubectl's --request-timeout: a duration; 0 or empty means the default."""
    if text is None or text.strip() in ("", "0"):
        return None
    return parse_duration(text, "--request-timeout") or None


@dataclass(frozen=True)
class SourceSpec:
    """Where a command reads (and writes): a snapshot, or a cluster as kubectl's flags name it."""

    snapshot: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    cluster: str | None = None
    user: str | None = None
    server: str | None = None
    token: str | None = None
    as_user: str | None = None
    as_groups: tuple[str, ...] = ()
    insecure_skip_tls_verify: bool = False
    certificate_authority: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    tls_server_name: str | None = None
    request_timeout: str | None = None
    worker_env: tuple[str, ...] = ()
    """``--worker-env``: GPUStack's worker settings (its manufacturer overrides), in place of those on its Deployment."""
    namespace: str | None = None
    all_namespaces: bool = False
    selector: str | None = None
    field_selector: str | None = None
    contexts: tuple[str, ...] = ()
    """Every ``--context`` given (a fleet command reads each; others take one)."""
    all_contexts: bool = False
    by_cluster: bool = False

    @property
    def selects(self) -> bool:
        """``-l`` or ``--field-selector`` is given."""
        return bool(self.selector or self.field_selector)

    @property
    def fleet(self) -> bool:
        """Several clusters are named: ``--context`` more than once, or ``--all-contexts``."""
        return self.all_contexts or len(self.contexts) > 1

    def clusters(self) -> list[tuple[str, Source]]:
        """(context, source) for each cluster a fleet command reads: contexts that reach the same cluster (its
        server address and CA) are read once, as the first of them, with a warning."""
        import sys

        from gpuctl.cli.errors import UsageError
        from gpuctl.cluster import kubeconfig
        from gpuctl.cluster.live import LiveSource

        if self.snapshot:
            raise UsageError("--snapshot reads one cluster: drop --context/--all-contexts, or --snapshot")
        names = list(dict.fromkeys(self.contexts))
        loaded = kubeconfig.load(self.kubeconfig)
        if self.all_contexts:
            if names:
                raise UsageError("--context and --all-contexts are exclusive: pick one")
            names = sorted(loaded.contexts)
        first: dict[tuple[str, str], str] = {}
        kept = []
        for name in names:
            identity = loaded.cluster_identity(name, self.server)
            if identity is not None and identity in first:
                seen = first[identity]
                sys.stderr.write(
                    f"warning: contexts {seen} and {name} reach the same cluster ({identity[0]}); counting it once, as {seen}\n"
                )
                continue
            if identity is not None:
                first[identity] = name
            kept.append(name)
        return [(name, LiveSource(replace(self, context=name, contexts=()).connection())) for name in kept]

    def connection(self) -> Any:
        from gpuctl.cli.errors import UsageError
        from gpuctl.cluster.live import TLS, Connection

        if self.insecure_skip_tls_verify and self.certificate_authority:
            raise UsageError(
                "--certificate-authority and --insecure-skip-tls-verify are exclusive: a CA is there to be checked"
            )
        if bool(self.client_certificate) != bool(self.client_key):
            raise UsageError("--client-certificate and --client-key go together: give both")
        return Connection(
            self.kubeconfig,
            self.context,
            parse_timeout(self.request_timeout),
            cluster=self.cluster,
            user=self.user,
            server=self.server,
            token=self.token,
            impersonate=self.as_user,
            impersonate_groups=self.as_groups,
            tls=TLS(
                self.insecure_skip_tls_verify,
                self.certificate_authority,
                self.client_certificate,
                self.client_key,
                self.tls_server_name,
            ),
        )

    def open(self) -> Source:
        """A snapshot when one is named, the cluster otherwise; its worker's manufacturer names put in force."""
        if self.snapshot:
            from gpuctl.cluster.snapshot import SnapshotSource

            return self.manufacturers(SnapshotSource(self.snapshot))
        from gpuctl.cluster.live import LiveSource

        return self.manufacturers(LiveSource(self.connection()))

    def live(self) -> LiveSource:
        """The cluster (a write, or a command that only makes sense live)."""
        from gpuctl.cli.errors import UsageError
        from gpuctl.cluster.live import LiveSource

        if self.snapshot:
            raise UsageError("this command changes or follows a live cluster: drop --snapshot (or GPUCTL_SNAPSHOT)")
        return self.manufacturers(LiveSource(self.connection()))

    def manufacturers(self, source: S) -> S:
        """Put in force the manufacturer names GPUStack's worker uses on this cluster: ``--worker-env`` where given,
        else the ``GPUSTACK_<MFR>_*`` settings of its Deployment (read as a snapshot is read; GPUStack's defaults
        where there is none)."""
        from gpuctl.cli.errors import UsageError
        from gpuctl.cluster import read
        from gpuctl.core import gpustack, naming

        try:
            given = gpustack.parse_worker_env(self.worker_env)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if given:
            try:
                naming.set_manufacturers(naming.manufacturer_table(given))
            except naming.ManufacturerOverrideError as exc:
                raise UsageError(f"--worker-env {exc}") from None
            return source
        naming.set_manufacturers(naming.DEFAULT_TABLE)

        def seen(deployment: dict[str, Any]) -> bool:
            """A snapshot's Deployment, as it is read: whether it is the worker's and changes the names in force."""
            namespace = (deployment.get("metadata") or {}).get("namespace")
            if namespace != gpustack.WORKER_NAMESPACE or not gpustack.is_worker_deployment(deployment):
                return False
            table = naming.manufacturer_table(gpustack.worker_environment(deployment))
            changed = dict(table.overrides) != dict(naming.MANUFACTURERS.overrides)
            naming.set_manufacturers(table)
            return changed

        if getattr(source, "is_snapshot", False):
            source.on_deployment(seen)  # type: ignore[attr-defined]
            return source
        worker = read.worker_deployment(source, gpustack.WORKER_NAMESPACE)
        if worker is not None:
            naming.set_manufacturers(naming.manufacturer_table(gpustack.worker_environment(worker)))
        return source

    def resolved_namespace(self, source: Source | None = None) -> str:
        """``-n``, else the kubeconfig context's namespace (a live source), else ``default``."""
        if self.namespace:
            return self.namespace
        if not self.snapshot:
            from gpuctl.cluster.live import LiveSource

            live = source if isinstance(source, LiveSource) else LiveSource(self.connection())
            ns = live.default_namespace()
            if ns:
                return ns
        return "default"

    def scope(self, source: Source | None = None) -> str | None:
        """The namespace a list reads: None for ``-A``."""
        from gpuctl.cli.errors import UsageError

        if self.all_namespaces:
            if self.namespace:
                raise UsageError("-n and -A are exclusive: pick one")
            return None
        return self.resolved_namespace(source)


def with_namespace(spec: SourceSpec, namespace: str) -> SourceSpec:
    return replace(spec, namespace=namespace)


def fleet_read(source: SourceSpec, read: Callable[[Source], T]) -> tuple[dict[str, T], list[tuple[str, str]]]:
    """``read`` on each cluster of a fleet command: what each answered, and (context, error) for each that failed —
    the others are still read and printed, and the command exits 1 at the end."""
    from gpuctl.cluster.errors import SourceError

    answers: dict[str, T] = {}
    failures: list[tuple[str, str]] = []
    for context, opened in source.clusters():
        try:
            answers[context] = read(opened)
        except SourceError as exc:
            failures.append((context, str(exc)))
    return answers, failures

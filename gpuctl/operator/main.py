"""``gpuctl-operator``: serve the admission webhooks and run the controllers in one process."""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading
from typing import Any

from gpuctl import __version__
from gpuctl.core import naming
from gpuctl.core.gpustack import COMPANION, STANDALONE, WORKER_NAMESPACE, parse_worker_env


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gpuctl-operator",
        description="The gpuctl operator: beside GPUStack's worker (companion: metrics, history and shadow verdicts), "
        "or in its place (standalone: admission webhooks and controllers for Kueue-shared GPU pools).",
    )
    p.add_argument(
        "--mode",
        choices=(COMPANION, STANDALONE),
        default=COMPANION,
        help="companion (default): read only, beside GPUStack's worker; standalone: serve the webhooks and write, "
        "where no worker runs (refused where one does)",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (the in-cluster service account when omitted)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--bind", default="0.0.0.0", help="address to serve on (default 0.0.0.0)")
    p.add_argument(
        "--port", type=int, default=9443, help="HTTPS port of the webhooks, health and metrics (default 9443)"
    )
    p.add_argument(
        "--probe-port",
        type=int,
        default=0,
        help="also serve /healthz, /readyz and /metrics over plain HTTP on this port (0: only on --port)",
    )
    p.add_argument("--tls-cert", help="serving certificate (PEM); reloaded when the file changes")
    p.add_argument("--tls-key", help="serving key (PEM)")
    p.add_argument("--insecure-http", action="store_true", help="serve plain HTTP (tests and local benchmarks only)")
    p.add_argument(
        "--resync",
        type=float,
        default=300.0,
        help="seconds between resyncs from the cache, the safety net behind the watches (default 300)",
    )
    p.add_argument("--request-timeout", type=float, default=10.0, help="seconds any one API call may take (default 10)")
    p.add_argument(
        "--watch-seconds", type=int, default=60, help="seconds the API server keeps one watch open (default 60)"
    )
    p.add_argument(
        "--stale-after",
        type=float,
        default=180.0,
        help="readiness fails once the webhooks' watches have not heard the API server for this long (default 180)",
    )
    p.add_argument(
        "--review-deadline",
        type=float,
        default=8.0,
        help="seconds a review may take before it is answered by failure policy (default 8, under the 10 s timeout)",
    )
    p.add_argument(
        "--memory-limit",
        type=_memory,
        help="the process's memory limit (768Mi, 1Gi, bytes); default: $GPUCTL_MEMORY_LIMIT, then the cgroup's",
    )
    p.add_argument(
        "--memory-target",
        type=_fraction,
        default=0.55,
        help="reviews start only while the process stays under this share of its memory limit (default 0.55)",
    )
    p.add_argument("--no-controllers", action="store_true", help="serve webhooks only")
    p.add_argument("--no-events", action="store_true", help="record no Kubernetes Events of the controllers' decisions")
    p.add_argument("--leader-elect", action="store_true", help="run the controllers only while holding the Lease")
    p.add_argument("--namespace", default="gpuctl-system", help="namespace of the leader Lease (default gpuctl-system)")
    p.add_argument(
        "--no-fit-affinity", action="store_true", help="the workload-fit-affinity setting off: no Workload fit pins"
    )
    p.add_argument("--cpu-aware", action="store_true", help="the instance-type-aware-cpu-manufacturer setting on")
    p.add_argument(
        "--health-check", metavar="URL", help="GET URL/healthz and exit 0 when it answers ok (an image's probe)"
    )
    p.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a GPUSTACK_<MFR>_* setting of GPUStack's worker (its manufacturer overrides); the companion also reads "
        "them from the worker's Deployment, and these win",
    )
    p.add_argument(
        "--gpustack-namespace",
        default=WORKER_NAMESPACE,
        help=f"where GPUStack's worker runs (default {WORKER_NAMESPACE})",
    )
    p.add_argument(
        "--shadow-settle",
        type=float,
        default=45.0,
        help="companion: seconds a disagreement must hold before it is reported (default 45: longer than the "
        "worker's 30 s check requeue, so its next pass can mend a moment's difference)",
    )
    p.add_argument(
        "--install-crds",
        action="store_true",
        help="standalone: create the worker.gpustack.ai CRDs (GPUStack's schemas) where none exist",
    )
    p.add_argument(
        "--register-webhooks",
        action="store_true",
        help="standalone: register gpuctl's webhook configurations once the webhooks answer (and again when the CA "
        "changes), so no fail-closed webhook is registered before its endpoint serves",
    )
    p.add_argument(
        "--webhook-ca",
        help="the CA bundle (PEM) the API server verifies the webhooks with (default: ca.crt beside --tls-cert)",
    )
    p.add_argument(
        "--webhook-service",
        default=f"{naming.OPERATOR_NAMESPACE}/{naming.OPERATOR_NAME}",
        help="NAMESPACE/NAME of the Service the webhooks are registered by (port 443)",
    )
    p.add_argument("--webhook-url", help="register the webhooks by this base URL instead (out of cluster)")
    p.add_argument("--version", action="version", version=f"gpuctl-operator {__version__}")
    args = p.parse_args(argv)
    companion = args.mode == COMPANION
    if companion and (args.install_crds or args.register_webhooks):
        p.error("--install-crds and --register-webhooks are the standalone operator's: the companion writes nothing")
    if args.register_webhooks and not (args.tls_cert and args.tls_key):
        p.error("--register-webhooks needs --tls-cert and --tls-key: the API server calls webhooks over TLS")
    if not args.health_check and not companion and not args.insecure_http and not (args.tls_cert and args.tls_key):
        p.error("--tls-cert and --tls-key are required (or --insecure-http)")
    try:
        args.worker_settings = parse_worker_env(args.worker_env)
    except ValueError as exc:
        p.error(str(exc))
    return args


def _memory(text: str) -> int:
    from gpuctl.operator.memory import parse_bytes

    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.05 <= value <= 0.95:
        raise argparse.ArgumentTypeError(f"{text!r}: give a share of the memory limit between 0.05 and 0.95")
    return value


def health_check(url: str) -> int:
    import ssl
    import urllib.request

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/healthz", timeout=5, context=ctx) as r:
            ok = r.status == 200 and r.read() == b"ok"
    except OSError as exc:
        print(f"health check failed: {exc}", file=sys.stderr)
        return 1
    print("ok" if ok else "not ok")
    return 0 if ok else 1


def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.health_check:
        return health_check(args.health_check)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from gpuctl.cluster.live import Connection, LiveSource
    from gpuctl.operator import beside
    from gpuctl.operator.cache import WEBHOOK_KINDS, OperatorCache
    from gpuctl.operator.controllers import Controllers
    from gpuctl.operator.events import EventRecorder
    from gpuctl.operator.leader import LeaderElector
    from gpuctl.operator.metrics import Metrics, event_families, gauge_family
    from gpuctl.operator.server import CertificateReloader, Limits, WebhookServer
    from gpuctl.operator.shadow import ShadowBook

    source = LiveSource(
        Connection(args.kubeconfig, args.context, args.request_timeout, field_manager=naming.OPERATOR_FIELD_MANAGER)
    )
    companion = args.mode == COMPANION
    log = logging.getLogger("gpuctl.operator")
    try:
        beside.start(source, args, log)
    except beside.Refused as exc:
        print(f"gpuctl-operator: {exc}", file=sys.stderr)
        return 1
    cache = OperatorCache(
        source,
        cpu_aware=args.cpu_aware,
        fit_affinity=not args.no_fit_affinity,
        watch_seconds=args.watch_seconds,
    )
    metrics = Metrics()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    # Events name this replica as the Pod it runs in (its host name), as client-go's recorders do.
    events = None if args.no_controllers or args.no_events else EventRecorder(source, socket.gethostname())
    shadow = ShadowBook(args.shadow_settle, events) if companion else None
    controllers = (
        None
        if args.no_controllers
        else Controllers(cache, source, metrics, resync_seconds=args.resync, events=events, shadow=shadow)
    )
    elector = (
        LeaderElector(
            source,
            args.namespace,
            annotations={naming.ANNOTATION_SERVING_PORT: str(args.port), naming.ANNOTATION_VERSION: __version__},
        )
        if args.leader_elect and controllers
        else None
    )

    def leading() -> bool:
        return elector.holds() if elector is not None else True

    def cache_checks() -> list[tuple[str, bool, str]]:
        if companion:
            synced = cache.synced()
            return [("cache", synced, "every kind is synced" if synced else "still syncing")]
        age = cache.contact_age(WEBHOOK_KINDS)
        return [
            ("webhook-cache", cache.webhooks_synced(), "the kinds the webhooks read are synced"),
            (
                "api-contact",
                age <= args.stale_after,
                f"the API server last answered the webhooks' watches {age:.0f}s ago (limit {args.stale_after:.0f}s)",
            ),
        ]

    def controller_checks() -> list[tuple[str, bool, str]]:
        if controllers is None:
            return []
        stuck = controllers.stuck()
        return [("controllers", stuck is None, stuck or "every controller is making progress")]

    def ready() -> list[tuple[str, bool, str]]:
        synced = cache.synced()
        return [
            *cache_checks(),
            *controller_checks(),
            ("controller-cache", True, "synced" if synced else "still syncing (the webhooks do not wait for it)"),
            (
                "leader",
                True,
                "leading" if controllers and leading() else "standing by" if controllers else "webhooks only",
            ),
        ]

    def healthy() -> list[tuple[str, bool, str]]:
        return controller_checks() or [("process", True, "serving")]

    def cache_gauges() -> list[Any]:
        return [
            gauge_family(
                "gpuctl_cache_synced",
                "Whether each kind's store holds its first list.",
                ["kind"],
                (([k.plural], 1.0 if i.synced.is_set() else 0.0) for k, i in cache.informers.items()),
            ),
            gauge_family(
                "gpuctl_cache_contact_age_seconds",
                "Seconds since the API server last answered each kind's watch.",
                ["kind"],
                (([k.plural], min(i.contact_age(), 1e9)) for k, i in cache.informers.items()),
            ),
        ]

    metrics.gauge(cache_gauges)
    if events is not None:
        recorder = events
        metrics.gauge(lambda: event_families(*recorder.counts()))
    certs = None if args.insecure_http or not args.tls_cert else CertificateReloader(args.tls_cert, args.tls_key)
    from gpuctl.operator.memory import UNLIMITED_BUDGET, detect_memory_limit

    try:
        memory_limit = args.memory_limit or detect_memory_limit()
    except ValueError as exc:
        print(f"gpuctl-operator: GPUCTL_MEMORY_LIMIT: {exc}", file=sys.stderr)
        return 2
    limits = Limits(deadline=args.review_deadline, memory_limit=memory_limit, memory_target=args.memory_target)
    server = WebhookServer(
        (args.bind, args.port),
        certs,
        cache,
        metrics,
        ready=ready,
        healthy=healthy,
        limits=limits,
        probe_address=(args.bind, args.probe_port) if args.probe_port else None,
        webhooks=not companion,
    )
    cache.start()
    server.start()
    log.info(
        "%s: serving on %s:%d (%s)%s",
        args.mode,
        args.bind,
        server.port,
        "http" if certs is None else "https",
        "" if companion else ", with the webhooks",
    )
    if args.register_webhooks:
        threading.Thread(
            target=beside.keep_webhooks_registered, args=(source, cache, args, stop, log), name="register", daemon=True
        ).start()
    if memory_limit is None:
        log.info(
            "no memory limit known: the reviews running at once may cost %d MiB between them", UNLIMITED_BUDGET >> 20
        )
    else:
        log.info(
            "memory limit %d MiB: reviews start while the process stays under %d MiB",
            memory_limit >> 20,
            int(memory_limit * args.memory_target) >> 20,
        )
    if elector is not None:
        threading.Thread(target=elector.run, args=(stop,), name="leader-election", daemon=True).start()
    if events is not None:
        events.start(stop)
    if controllers is not None:
        controllers.start(stop, leading)
    stop.wait()
    log.info("stopping")
    server.shutdown()
    cache.stop()
    return 0


def main() -> None:
    sys.exit(run())

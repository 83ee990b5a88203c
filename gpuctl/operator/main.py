"""``gpuctl-operator``: serve the admission webhooks and run the controllers in one process."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time

from gpuctl import __version__


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gpuctl-operator",
        description="The gpuctl operator: admission webhooks and controllers for Kueue-shared GPU pools.",
    )
    p.add_argument("--kubeconfig", help="kubeconfig file (the in-cluster service account when omitted)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--bind", default="0.0.0.0", help="address to serve on (default 0.0.0.0)")
    p.add_argument(
        "--port", type=int, default=9443, help="HTTPS port of the webhooks, health and metrics (default 9443)"
    )
    p.add_argument("--tls-cert", help="serving certificate (PEM); reloaded when the file changes")
    p.add_argument("--tls-key", help="serving key (PEM)")
    p.add_argument("--insecure-http", action="store_true", help="serve plain HTTP (tests and local benchmarks only)")
    p.add_argument("--resync", type=float, default=2.0, help="seconds between controller passes (default 2)")
    p.add_argument("--no-controllers", action="store_true", help="serve webhooks only")
    p.add_argument("--leader-elect", action="store_true", help="run the controllers only while holding the Lease")
    p.add_argument("--namespace", default="gpuctl-system", help="namespace of the leader Lease (default gpuctl-system)")
    p.add_argument(
        "--no-fit-affinity", action="store_true", help="the workload-fit-affinity setting off: no Workload fit pins"
    )
    p.add_argument("--cpu-aware", action="store_true", help="the instance-type-aware-cpu-manufacturer setting on")
    p.add_argument(
        "--health-check", metavar="URL", help="GET URL/healthz and exit 0 when it answers ok (an image's probe)"
    )
    p.add_argument("--version", action="version", version=f"gpuctl-operator {__version__}")
    args = p.parse_args(argv)
    if not args.health_check and not args.insecure_http and not (args.tls_cert and args.tls_key):
        p.error("--tls-cert and --tls-key are required (or --insecure-http)")
    return args


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
    from gpuctl.cluster.errors import SourceError
    from gpuctl.cluster.live import Connection, LiveSource
    from gpuctl.operator.controllers import Controllers
    from gpuctl.operator.leader import LeaderElector
    from gpuctl.operator.metrics import Metrics
    from gpuctl.operator.server import CertificateReloader, serve
    from gpuctl.operator.state import StateCache

    source = LiveSource(Connection(args.kubeconfig, args.context, 10.0))
    cache = StateCache(source, cpu_aware=args.cpu_aware, fit_affinity=not args.no_fit_affinity)
    metrics = Metrics()
    certs = None if args.insecure_http else CertificateReloader(args.tls_cert, args.tls_key)
    server = serve((args.bind, args.port), certs, cache, metrics, cache.loaded.is_set)
    log = logging.getLogger("gpuctl.operator")
    log.info("serving on %s:%d (%s)", args.bind, args.port, "http" if certs is None else "https")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    controllers = Controllers(source, metrics)
    elector = LeaderElector(source, args.namespace) if args.leader_elect else None
    while not stop.is_set():
        started = time.monotonic()
        try:
            leading = not args.no_controllers and (elector is None or elector.try_acquire())
            state = cache.refresh(webhook_only=not leading)
            if leading:
                controllers.run_once(state, elector.holds if elector is not None else lambda: True)
        except SourceError as exc:
            log.warning("pass skipped: %s", exc)
        except Exception:
            log.exception("pass failed; the next one retries")
        stop.wait(max(0.1, args.resync - (time.monotonic() - started)))
    server.shutdown()
    return 0


def main() -> None:
    sys.exit(run())

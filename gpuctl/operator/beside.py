"""What the operator does at start, by what the cluster runs: GPUStack's worker settings read (the manufacturer
overrides), and for the standalone operator the refusal where the worker runs, the CRDs created where none exist, and
its webhook configurations registered once its webhooks answer."""

from __future__ import annotations

import argparse
import base64
import datetime
import logging
import threading
from pathlib import Path
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.errors import NotServedError, SourceError
from gpuctl.cluster.live import LiveSource
from gpuctl.core import gpustack, naming
from gpuctl.core.errors import GpuctlError
from gpuctl.core.gpustack import COMPANION

REGISTER_EVERY = 60.0
"""Seconds between re-applies of the webhook configurations (a rotated CA, a configuration removed by hand)."""


class Refused(GpuctlError):
    """The operator must not start here: one line saying why and what to do."""


def start(source: LiveSource, args: argparse.Namespace, log: logging.Logger) -> None:
    """Before the cache and the server: put the cluster's manufacturer table in force; for the standalone operator,
    refuse where GPUStack's worker runs and create the CRDs that do not exist. Raises Refused."""
    settings: dict[str, str] = {}
    if args.mode == COMPANION:
        settings = worker_settings(source, args.gpustack_namespace, log)
    settings.update(args.worker_settings)
    try:
        table = naming.manufacturer_table(settings)
    except naming.ManufacturerOverrideError as exc:
        raise Refused(str(exc)) from None
    naming.set_manufacturers(table)
    if table.overrides:
        log.info("manufacturer overrides of GPUStack's worker in force: %s", ", ".join(sorted(table.overrides)))
    if args.mode == COMPANION:
        return
    refusal = gpustack.standalone_refusal(presence(source, args.gpustack_namespace), _now())
    if refusal is not None:
        raise Refused(refusal)
    if args.install_crds:
        install_crds(source, log)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def worker_settings(source: LiveSource, namespace: str, log: logging.Logger) -> dict[str, str]:
    """The ``GPUSTACK_*`` settings on the worker's Deployment ({} where none runs or it cannot be read, said so)."""
    try:
        found = source.list(kinds.DEPLOYMENT, namespace=namespace, label_selector=gpustack.WORKER_SELECTOR)
    except SourceError as exc:
        log.warning(
            "GPUStack's worker Deployment in %s cannot be read (%s): GPUStack's default names stand", namespace, exc
        )
        return {}
    workers = [d for d in found if gpustack.is_worker_deployment(d)]
    if not workers:
        log.info("no Deployment of GPUStack's worker in %s: GPUStack's default names stand", namespace)
        return {}
    return gpustack.worker_environment(workers[0])


def presence(source: LiveSource, namespace: str) -> gpustack.WorkerPresence:
    """What the cluster shows of GPUStack's worker. Raises Refused where that cannot be read: the standalone operator
    starts only where it is known that no worker runs."""

    def get(kind: kinds.Kind, name: str, ns: str | None = None) -> dict[str, Any] | None:
        try:
            return source.get(kind, name, ns)
        except NotServedError:  # no such API, so no such object
            return None

    try:
        lease = get(kinds.LEASE, gpustack.WORKER_LEASE, namespace)
        configurations = [
            name
            for kind, name in (
                (kinds.MUTATING_WEBHOOKS, gpustack.MUTATING_CONFIGURATION),
                (kinds.VALIDATING_WEBHOOKS, gpustack.VALIDATING_CONFIGURATION),
            )
            if get(kind, name) is not None
        ]
    except SourceError as exc:
        raise Refused(
            f"whether GPUStack's worker runs here cannot be read ({exc}); the standalone operator needs get on the "
            f"Lease {namespace}/{gpustack.WORKER_LEASE} and the webhook configurations "
            f"{', '.join(gpustack.CONFIGURATIONS)}"
        ) from None
    return gpustack.worker_presence(lease, configurations, namespace)


def install_crds(source: LiveSource, log: logging.Logger) -> None:
    """Create the worker.gpustack.ai CRDs that do not exist (those that do stand, whoever installed them)."""
    from gpuctl.operator import crds

    try:
        existing = [d["metadata"]["name"] for d in crds.definitions() if source.get(kinds.CRD, d["metadata"]["name"])]
    except SourceError as exc:
        raise Refused(f"whether the worker.gpustack.ai CRDs exist cannot be read: {exc}") from None
    for definition in crds.missing(existing):
        try:
            source.create(kinds.CRD, definition)
        except SourceError as exc:
            if "already exists" not in str(exc):
                raise Refused(f"creating CRD {definition['metadata']['name']}: {exc}") from None
        log.info("created CRD %s", definition["metadata"]["name"])


def webhook_ca(args: argparse.Namespace) -> bytes:
    path = Path(args.webhook_ca) if args.webhook_ca else Path(args.tls_cert).with_name("ca.crt")
    return path.read_bytes()


def desired_configurations(args: argparse.Namespace) -> list[dict[str, Any]]:
    from gpuctl.operator.manifests import webhook_configurations

    bundle = base64.b64encode(webhook_ca(args)).decode()
    if args.webhook_url:
        return webhook_configurations(ca_bundle=bundle, url=args.webhook_url.rstrip("/"))
    namespace, _, name = args.webhook_service.rpartition("/")
    return webhook_configurations(ca_bundle=bundle, service=(namespace or naming.OPERATOR_NAMESPACE, name))


def keep_webhooks_registered(
    source: LiveSource, cache: Any, args: argparse.Namespace, stop: threading.Event, log: logging.Logger
) -> None:
    """Once the webhooks answer (the kinds they read are listed), apply gpuctl's webhook configurations; then again
    every :data:`REGISTER_EVERY` seconds (server-side apply: a no-op while nothing changed)."""
    while not stop.is_set() and not cache.webhooks_synced():
        stop.wait(0.2)
    registered = False
    while not stop.is_set():
        try:
            for config in desired_configurations(args):
                kind = kinds.MUTATING_WEBHOOKS if config["kind"].startswith("Mutating") else kinds.VALIDATING_WEBHOOKS
                source.patch(
                    kind,
                    config["metadata"]["name"],
                    config,
                    patch_type="application/apply-patch+yaml",
                    field_manager=naming.OPERATOR_FIELD_MANAGER,
                    force=True,
                )
            if not registered:
                log.info(
                    "registered the webhook configurations %s",
                    ", ".join((naming.MUTATING_CONFIGURATION, naming.VALIDATING_CONFIGURATION)),
                )
            registered = True
        except (OSError, SourceError) as exc:
            log.warning("registering the webhook configurations failed (%s); retrying", exc)
            stop.wait(2.0)
            continue
        stop.wait(REGISTER_EVERY)

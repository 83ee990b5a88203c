"""A stand-in for NVIDIA's DCGM exporter: a small HTTP server on loopback serving ``/metrics`` in the Prometheus text
format (0.0.4) the exporter serves, with the series of its default collectors that gpuctl's card-hours read.

What it serves, per the exporter's documented defaults:

- ``DCGM_FI_DEV_GPU_UTIL`` (gauge, percent 0..100) for every whole card. A card in MIG mode does not report it (the
  field is not supported there), so a card with MIG instances leaves it out unless the test sets it.
- ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (gauge, a ratio 0..1) for every MIG instance, labelled with the instance's
  ``GPU_I_ID`` and ``GPU_I_PROFILE``; a whole card reports it too only when the test gives it a value (the exporter
  does on cards whose profiling metrics are enabled).
- ``DCGM_FI_DEV_FB_USED`` (gauge, MiB) for every card and MIG instance.

Every series carries the exporter's entity labels ``gpu`` (the card's index), ``UUID``, ``pci_bus_id``, ``device``
(``nvidia<index>``), ``modelName``, ``Hostname`` and ``DCGM_FI_DRIVER_VERSION``; a MIG instance's add ``GPU_I_PROFILE``
and ``GPU_I_ID``; and with the exporter's Kubernetes mapping, the holder's ``container``, ``namespace`` and ``pod``
when a Pod holds the card or instance (left out otherwise).

Values are set by the test at run time (``set_util``, ``set_engine_active``, ``set_fb_used``, ``set_holder``); each
scrape renders the state of that moment. ``scrapes`` counts the requests served, so a test can wait for a scrape that
saw its change.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"

FAMILIES = (
    (GPU_UTIL, "GPU utilization (in %)."),
    (FB_USED, "Framebuffer memory used (in MiB)."),
    (ENGINE_ACTIVE, "Ratio of time the graphics engine is active."),
)
"""Each family's name and help text, in the order the exporter lists them; all are gauges."""

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_MODEL = "NVIDIA H100 80GB HBM3"
DEFAULT_DRIVER = "570.124.06"


@dataclass
class Holder:
    """The Pod the exporter's Kubernetes mapping names for a card or instance."""

    namespace: str
    pod: str
    container: str = "main"


@dataclass
class Card:
    index: int
    uuid: str
    model: str = DEFAULT_MODEL
    util: float | None = 0.0
    """Percent; ``None``: not reported (a card in MIG mode)."""
    engine_active: float | None = None
    """A ratio; ``None``: not reported (the default for a whole card)."""
    fb_used: float | None = 0.0
    """MiB; ``None``: not reported."""
    holder: Holder | None = None

    @property
    def pci_bus_id(self) -> str:
        return f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"


@dataclass
class Instance:
    """A MIG instance of a card: the GPU instance id and its profile (``1g.10gb``, ``3g.40gb``, ...)."""

    card: Card
    gi_id: int
    profile: str
    engine_active: float | None = 0.0
    """A ratio; ``None``: not reported."""
    fb_used: float | None = 0.0
    holder: Holder | None = None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(family: str, value: float) -> str:
    """The exporter's integer fields (utilization, framebuffer) as integers where they are whole, its float fields
    (the profiling ratios) with six decimals."""
    if family != ENGINE_ACTIVE and float(value).is_integer():
        return str(int(value))
    return f"{value:f}"


class FakeDcgmExporter:
    """``with FakeDcgmExporter(hostname="gpu-1") as dcgm: dcgm.add_card(0, "GPU-..."); ...`` — serving from
    :meth:`start` to :meth:`stop` on ``127.0.0.1:<free port>``; :attr:`target` is what a scrape config names."""

    def __init__(self, hostname: str = "gpu-node-1", driver_version: str = DEFAULT_DRIVER) -> None:
        self.hostname = hostname
        self.driver_version = driver_version
        self.cards: dict[str, Card] = {}
        self.instances: dict[tuple[str, int], Instance] = {}
        self.scrapes = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- the state --------------------------------------------------------

    def add_card(
        self,
        index: int,
        uuid: str,
        *,
        model: str = DEFAULT_MODEL,
        util: float | None = 0.0,
        fb_used: float | None = 0.0,
        holder: Holder | None = None,
    ) -> Card:
        with self._lock:
            card = Card(index=index, uuid=uuid, model=model, util=util, fb_used=fb_used, holder=holder)
            self.cards[uuid] = card
            return card

    def add_instance(
        self,
        uuid: str,
        gi_id: int,
        profile: str,
        *,
        engine_active: float | None = 0.0,
        fb_used: float | None = 0.0,
        holder: Holder | None = None,
    ) -> Instance:
        """A MIG instance on card ``uuid``; the card stops reporting ``DCGM_FI_DEV_GPU_UTIL``, as in MIG mode."""
        with self._lock:
            card = self.cards[uuid]
            if not any(k[0] == uuid for k in self.instances):
                card.util = None
            instance = Instance(
                card=card, gi_id=gi_id, profile=profile, engine_active=engine_active, fb_used=fb_used, holder=holder
            )
            self.instances[(uuid, gi_id)] = instance
            return instance

    def remove(self, uuid: str, gi_id: int | None = None) -> None:
        """Stop reporting a card (with its instances) or one instance."""
        with self._lock:
            if gi_id is not None:
                del self.instances[(uuid, gi_id)]
                return
            del self.cards[uuid]
            for key in [k for k in self.instances if k[0] == uuid]:
                del self.instances[key]

    def set_util(self, uuid: str, percent: float | None) -> None:
        with self._lock:
            self.cards[uuid].util = percent

    def set_engine_active(self, uuid: str, ratio: float | None, gi_id: int | None = None) -> None:
        """A MIG instance's ratio (``gi_id``), or the whole card's."""
        with self._lock:
            if gi_id is None:
                self.cards[uuid].engine_active = ratio
            else:
                self.instances[(uuid, gi_id)].engine_active = ratio

    def set_fb_used(self, uuid: str, mib: float | None, gi_id: int | None = None) -> None:
        with self._lock:
            if gi_id is None:
                self.cards[uuid].fb_used = mib
            else:
                self.instances[(uuid, gi_id)].fb_used = mib

    def set_holder(self, uuid: str, holder: Holder | None, gi_id: int | None = None) -> None:
        with self._lock:
            if gi_id is None:
                self.cards[uuid].holder = holder
            else:
                self.instances[(uuid, gi_id)].holder = holder

    # ---- the exposition ---------------------------------------------------

    def _labels(self, card: Card, instance: Instance | None) -> dict[str, str]:
        labels = {
            "gpu": str(card.index),
            "UUID": card.uuid,
            "pci_bus_id": card.pci_bus_id,
            "device": f"nvidia{card.index}",
            "modelName": card.model,
        }
        if instance is not None:
            labels["GPU_I_PROFILE"] = instance.profile
            labels["GPU_I_ID"] = str(instance.gi_id)
        labels["Hostname"] = self.hostname
        labels["DCGM_FI_DRIVER_VERSION"] = self.driver_version
        holder = instance.holder if instance is not None else card.holder
        if holder is not None:
            labels.update(container=holder.container, namespace=holder.namespace, pod=holder.pod)
        return labels

    def _samples(self, family: str) -> Iterator[tuple[dict[str, str], float]]:
        for card in sorted(self.cards.values(), key=lambda c: c.index):
            value = {GPU_UTIL: card.util, ENGINE_ACTIVE: card.engine_active, FB_USED: card.fb_used}[family]
            if value is not None:
                yield self._labels(card, None), value
            for instance in sorted(
                (i for (uuid, _), i in self.instances.items() if uuid == card.uuid), key=lambda i: i.gi_id
            ):
                ivalue = {GPU_UTIL: None, ENGINE_ACTIVE: instance.engine_active, FB_USED: instance.fb_used}[family]
                if ivalue is not None:
                    yield self._labels(card, instance), ivalue

    def render(self) -> str:
        """The exposition as a scrape would get it now."""
        lines: list[str] = []
        with self._lock:
            for family, help_text in FAMILIES:
                lines.append(f"# HELP {family} {help_text}")
                lines.append(f"# TYPE {family} gauge")
                for labels, value in self._samples(family):
                    pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                    lines.append(f"{family}{{{pairs}}} {_number(family, value)}")
        return "\n".join(lines) + "\n"

    # ---- the server -------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the fake DCGM exporter is not started")
        return int(self._server.server_address[1])

    @property
    def target(self) -> str:
        """``127.0.0.1:<port>``, as a scrape config's ``static_configs`` names it."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.target}/metrics"

    def start(self) -> FakeDcgmExporter:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.render().encode()
                with exporter._lock:
                    exporter.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-dcgm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> FakeDcgmExporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.stop()

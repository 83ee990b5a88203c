"""``gpuctl top``: a live view of pools (four views with bars), queues (depth, head, age) and held Workloads,
refreshed from watches on a live cluster.

Keys: ``s`` sorts the pools (name, free whole cards, free slice), ``j``/``k`` (or the arrows) move the selection among
held Workloads, ``e`` (or Enter) opens or closes the selected one's explanation, ``q`` or Ctrl-C quits. On a snapshot,
or when stdout is not a terminal, it prints one frame and exits.
"""

import contextlib
import os
import select
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from gpuctl.cli.names import complete_instancetypes
from gpuctl.cli.registry import SourceFlags, command
from gpuctl.cli.source import SourceSpec

if TYPE_CHECKING:
    from rich.console import RenderableType

    from gpuctl.cluster.live import LiveSource
    from gpuctl.cluster.read import Source
    from gpuctl.core.instancetypes import InstanceType
    from gpuctl.core.ledger import NodeDevices
    from gpuctl.core.pods import Pod
    from gpuctl.core.workloads import ClusterQueue, LocalQueue, Workload

SORTS = ("name", "free cards", "free slice")
BAR = 10


@dataclass
class Records:
    """What one frame reads: records of six kinds, from watches or one read."""

    instancetypes: dict[str, "InstanceType"] = field(default_factory=dict)
    devices: dict[str, "NodeDevices"] = field(default_factory=dict)
    cluster_queues: dict[str, "ClusterQueue"] = field(default_factory=dict)
    local_queues: dict[str, "LocalQueue"] = field(default_factory=dict)
    workloads: dict[str, "Workload"] = field(default_factory=dict)
    pods: dict[str, "Pod"] = field(default_factory=dict)


def read_once(source: "Source") -> Records:
    from gpuctl.cluster import kinds, read
    from gpuctl.core.workloads import parse_local_queue

    return Records(
        {t.name: t for t in read.instancetypes(source)},
        {d.node: d for d in read.devices(source)},
        read.cluster_queues(source),
        {f"{q.namespace}/{q.name}": q for q in (parse_local_queue(o) for o in source.list(kinds.LOCALQUEUE))},
        {w.key: w for w in read.workloads(source)},
        {f"{p.namespace}/{p.name}": p for p in read.pods(source) if p.workload},
    )


class Watched:
    """The six kinds kept current by informers, and the Nodes' names; ``changed`` is set on every event."""

    def __init__(self, source: Any) -> None:
        from gpuctl.cluster import kinds
        from gpuctl.cluster.informer import Informer
        from gpuctl.core.instancetypes import parse_instancetype
        from gpuctl.core.ledger import parse_devices
        from gpuctl.core.pods import parse_pod
        from gpuctl.core.workloads import parse_cluster_queue, parse_local_queue, parse_workload

        self.changed = threading.Event()
        self.lock = threading.RLock()

        def notify(*_: Any) -> None:
            self.changed.set()

        def pod(obj: dict[str, Any]) -> Any:
            p = parse_pod(obj)
            return p if p.workload else None

        parsers: list[tuple[Any, Callable[[dict[str, Any]], Any], bool]] = [
            (kinds.INSTANCETYPE, parse_instancetype, True),
            (kinds.DEVICES, parse_devices, True),
            (kinds.CLUSTERQUEUE, parse_cluster_queue, False),
            (kinds.LOCALQUEUE, parse_local_queue, False),
            (kinds.WORKLOAD, parse_workload, False),
            (kinds.POD, pod, False),
            # Only their names: a Devices object whose Node is gone counts nowhere.
            (kinds.NODE, lambda obj: True, False),
        ]
        self.informers = [
            Informer(source, kind, parse, handler=notify, lock=self.lock, optional=optional)
            for kind, parse, optional in parsers
        ]

    def start(self) -> None:
        for i in self.informers:
            i.start()

    def stop(self) -> None:
        for i in self.informers:
            i.stop()

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def records(self) -> Records:
        from gpuctl.core.ledger import split_orphans

        with self.lock:
            stores = [dict(i.store) for i in self.informers]
        instancetypes, devices, cqs, lqs, workloads, pods, nodes = stores
        return Records(
            {t.name: t for t in instancetypes.values()},
            {d.node: d for d in split_orphans(devices.values(), nodes).served},
            {q.name: q for q in cqs.values()},
            {f"{q.namespace}/{q.name}": q for q in lqs.values()},
            {w.key: w for w in workloads.values()},
            {f"{p.namespace}/{p.name}": p for p in pods.values()},
        )


# ----------------------------------------------------------------------------------------------- one frame


def _bar(remaining: int, capacity: int, length: int = BAR) -> str:
    """A view's bar (``length`` long) over its numbers, on two lines, so a narrow column shortens the bar and never
    splits the numbers."""
    if capacity <= 0:
        return "-"
    filled = round(length * remaining / capacity)
    return "█" * filled + "░" * (length - filled) + f"\n{remaining}/{capacity}"


def shared_prefix(names: list[str]) -> str:
    """The prefix every name shares, up to a ``-`` (``gpustack--``), when there are several names and each keeps
    something after it; empty otherwise."""
    distinct = sorted(set(names))
    if len(distinct) < 2:
        return ""
    first, last = distinct[0], distinct[-1]  # sorted: what these two share, all share
    shared = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), min(len(first), len(last)))
    prefix = first[:shared]
    prefix = prefix[: prefix.rfind("-") + 1]
    return prefix if all(len(n) > len(prefix) for n in distinct) else ""


def fold(name: str, width: int) -> str:
    """A name in lines of at most ``width`` characters, broken after a ``-`` (a part longer than the width is cut
    where it must be)."""
    import re

    lines: list[str] = []
    line = ""
    for part in re.findall(r"[^-]*-+|[^-]+", name):
        while len(part) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(part[:width])
            part = part[width:]
        if len(line) + len(part) > width:
            lines.append(line)
            line = ""
        line += part
    return "\n".join([*lines, line] if line else lines)


def _name_width(header: str, names: list[str], others: int, columns: int, width: int) -> int:
    """How wide a table's name column may be: what the other columns leave of the console (columns are two spaces
    apart), but never below its header or its longest part between dashes."""
    import re

    longest = max([len(header)] + [len(n) for n in names])
    part = max([len(header)] + [len(p) for n in names for p in re.findall(r"[^-]*-+|[^-]+", n)])
    room = width - others - 2 * (columns - 1)
    return max(min(longest, room), part)


@dataclass
class View:
    sort: int = 0
    selected: int = 0
    explain: str | None = None
    held_keys: list[str] = field(default_factory=list)
    pools: tuple[str, ...] = ()
    """Only these pools (and their queues and Workloads); every one when empty."""


def frame(records: Records, view: View, now: float, note: str = "", width: int = 80) -> "RenderableType":
    """Pools, queues and held Workloads as three tables in ``width`` columns: values whole, names folded at ``-``
    (without the prefix every pool shares), numbers never split."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from gpuctl.core.ages import age_text
    from gpuctl.core.checks import holding_check
    from gpuctl.core.explain import held_at
    from gpuctl.core.queueing import (
        asks,
        cluster_queues_of,
        epoch_seconds,
        pending_order,
        pods_by_workload,
        queue_timestamp,
    )
    from gpuctl.core.views import instancetype_views

    devices = list(records.devices.values())
    rows = []
    for t in records.instancetypes.values():
        if not t.acceleratable or (view.pools and t.name not in view.pools):
            continue
        v = instancetype_views(t, devices)
        rows.append((t.name, v, t.phase))
    workloads = list(records.workloads.values())
    queue_of = cluster_queues_of(workloads, records.local_queues.values())
    queue_names = sorted(cq for cq in records.cluster_queues if not view.pools or cq in view.pools)
    pods = pods_by_workload(records.pods.values())
    held = sorted(
        (
            w
            for w in workloads
            if held_at(w, pods.get(f"{w.namespace}/{w.pod_owner}", ())) is not None
            and (not view.pools or queue_of.get(w.key) in view.pools)
        ),
        key=lambda w: w.key,
    )
    prefix = shared_prefix(
        [r[0] for r in rows] + queue_names + [queue_of.get(w.key) or "" for w in held if queue_of.get(w.key)]
    )

    def short(name: str) -> str:
        return name[len(prefix) :] if prefix and name.startswith(prefix) else name

    title = "Pools (remaining/capacity)" + (f", names without {prefix}" if prefix else "")
    pools = Table(title=title, title_justify="left", box=None, pad_edge=False)
    key: Callable[[tuple[str, Any, str]], Any] = [
        lambda r: r[0],
        lambda r: (-r[1].accelerator.remaining, r[0]),
        lambda r: (-r[1].sliced.once_max_request, r[0]),
    ][view.sort]
    ordered = sorted(rows, key=key)
    counts = [
        [(r[1].accelerator.remaining, r[1].accelerator.capacity) for r in ordered],
        [(r[1].shared.remaining, r[1].shared.capacity) for r in ordered],
        [(r[1].sliced.remaining, r[1].sliced.capacity) for r in ordered],
        [(r[1].partitioned.remaining, r[1].partitioned.capacity) for r in ordered],
    ]
    views = ("EX", "SH", "SL", "PT")
    number_widths = [
        max([len(h)] + [len(f"{a}/{b}") for a, b in pairs]) for h, pairs in zip(views, counts, strict=True)
    ]
    phase_width = max([len("PHASE")] + [len(r[2] or "-") for r in ordered])
    names = [short(r[0]) for r in ordered]
    parts_width = max([len("POOL")] + [len(p) for n in names for p in n.replace("-", "- ").split()])
    # The bars shrink (down to their numbers' width) before the names fold any further than at each dash.
    spare = width - parts_width - phase_width - 2 * 5 - sum(max(w, BAR) for w in number_widths)
    bar = BAR if spare >= 0 else max(1, BAR + spare // 4)
    view_widths = [max(w, bar) for w in number_widths]
    name_width = _name_width("POOL", names, sum(view_widths) + phase_width, 6, width)
    pools.add_column("POOL", no_wrap=True, min_width=name_width, max_width=name_width)
    for header, column_width in zip(views, view_widths, strict=True):
        pools.add_column(header, no_wrap=True, min_width=column_width)
    pools.add_column("PHASE", no_wrap=True, min_width=phase_width)
    for name, r, *cells in zip(names, ordered, *counts, strict=True):
        pools.add_row(
            fold(name, name_width),
            *(
                _bar(remaining, capacity, min(bar, w))
                for (remaining, capacity), w in zip(cells, view_widths, strict=True)
            ),
            r[2] or "-",
        )

    queues = Table(title="Queues", title_justify="left", box=None, pad_edge=False)
    queue_rows = []
    for cq in queue_names:
        line = pending_order(workloads, queue_of, cq)
        running = sum(1 for w in workloads if queue_of.get(w.key) == cq and w.admitted and not w.finished)
        head = line[0] if line else None
        joined = epoch_seconds(queue_timestamp(head)) if head is not None else None
        queue_rows.append(
            (
                short(cq),
                str(len(line)),
                str(running),
                f"{head.key} ({asks(head)})" if head else "-",
                age_text(now - joined) if joined is not None else "-",
            )
        )
    numbers = [len("PENDING"), len("ADMITTED"), max([len("AGE")] + [len(r[4]) for r in queue_rows])]
    head_width = max([len("HEAD")] + [len(r[3]) for r in queue_rows])
    cq_width = _name_width("CLUSTERQUEUE", [r[0] for r in queue_rows], sum(numbers) + min(head_width, 30), 5, width)
    queues.add_column("CLUSTERQUEUE", no_wrap=True, min_width=cq_width, max_width=cq_width)
    queues.add_column("PENDING", no_wrap=True, min_width=numbers[0])
    queues.add_column("ADMITTED", no_wrap=True, min_width=numbers[1])
    queues.add_column("HEAD", overflow="fold")
    queues.add_column("AGE", no_wrap=True, min_width=numbers[2])
    for cq, pending, running_cell, head_cell, age in queue_rows:
        queues.add_row(fold(cq, cq_width), pending, running_cell, head_cell, age)

    view.held_keys = [w.key for w in held]
    view.selected = min(view.selected, max(0, len(held) - 1))
    table = Table(title="Held workloads (j/k select, e explain)", title_justify="left", box=None, pad_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("WORKLOAD", overflow="fold")
    table.add_column("QUEUE", overflow="fold")
    table.add_column("GATE", no_wrap=True, min_width=len("GATE"))
    table.add_column("CHECK", overflow="fold")
    for i, w in enumerate(held):
        gate = held_at(w, pods.get(f"{w.namespace}/{w.pod_owner}", ()))
        table.add_row(
            ">" if i == view.selected else " ",
            w.key,
            short(queue_of.get(w.key) or "-"),
            str(gate),
            holding_check(w) if gate == 3 else "",
        )
    parts: list[Any] = [pools, Text(""), queues, Text(""), table]
    if view.explain:
        parts += [Text(""), Text(view.explain)]
    status = f"sort: {SORTS[view.sort]} (s)   q quits" + (f"   {note}" if note else "")
    parts += [Text(""), Text(status, style="bold red" if "STALE" in note else "dim")]
    return Group(*parts)


# ----------------------------------------------------------------------------------------------- keys


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[float], str]]:
    """Single keypresses from the terminal (cbreak mode, restored on exit); a reader that waits up to a timeout."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def read(timeout: float) -> str:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return ""
        data = os.read(fd, 8).decode(errors="replace")
        return {"\x1b[A": "k", "\x1b[B": "j", "\r": "e", "\n": "e"}.get(data, data[:1])

    try:
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _explanation(source: "Source", key: str) -> str:
    from gpuctl.cli.usecases import explained, explanation_text

    namespace, _, name = key.partition("/")
    try:
        return explanation_text(explained(source, namespace, name), wide=False)
    except Exception as exc:  # noqa: BLE001 - an explanation that cannot be read is shown, not fatal
        return f"{key}: cannot explain: {exc}"


@command(
    "top",
    summary="Watch pools, queues and held Workloads live.",
    examples="""
  # Live, redrawn as the watches see changes (s sorts, j/k select, e explains, q quits)
  gpuctl top

  # One frame, e.g. for a ticket
  gpuctl top --once --snapshot ./dump""",
    listed=80,
    source=SourceFlags(selectors=True),
)
def top_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[INSTANCETYPE]...",
            help="Only these pools, their queues and Workloads (default: every one).",
            autocompletion=complete_instancetypes,
        ),
    ] = None,
    interval: Annotated[float, typer.Option("--interval", min=0.2, max=3600, help="Seconds between redraws.")] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    *,
    source: SourceSpec,
) -> None:
    """A live view of pools (EX/SH/SL/PT with bars), queues (depth, head, age) and held Workloads, redrawn as the
    watches see changes; keys sort it and open a held Workload's explanation."""
    from rich.console import Console
    from rich.live import Live

    from gpuctl.cli import refs
    from gpuctl.cluster import kinds, read

    opened = source.open()
    pools = [t.name for t in read.instancetypes(opened, refs.object_names(names or [], kinds.INSTANCETYPE, what="top"))]
    pools = pools if names else []
    chosen = read.selected(
        opened, kinds.INSTANCETYPE, label_selector=source.selector, field_selector=source.field_selector
    )
    if chosen is not None:
        pools = [n for _, n in sorted(chosen) if not pools or n in pools]
        if not pools:
            sys.stderr.write("No resources found.\n")
            return
    plain = bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"
    console = Console(color_system=None) if plain else Console()  # NO_COLOR: no styles at all, as every table
    interactive = sys.stdout.isatty() and sys.stdin.isatty() and not once
    if getattr(opened, "is_snapshot", False) or not interactive:
        console.print(frame(read_once(opened), View(pools=tuple(pools)), time.time(), width=console.width))
        return
    from gpuctl.cli.watching import Poller

    watched = Watched(opened)
    watched.start()
    # The watches are silent when nothing changes and when the API server hangs alike: a ping tells them apart.
    live_source = cast("LiveSource", opened)
    alive = Poller(lambda: live_source.ping(interval), interval).start()
    started = time.time()
    view = View(pools=tuple(pools))
    try:
        with _keys() as key, Live(console=console, auto_refresh=False, screen=False, transient=False) as live:
            redraw = True
            deadline = time.monotonic()
            while True:
                if watched.changed.is_set() or redraw or time.monotonic() >= deadline:
                    watched.changed.clear()
                    now = time.time()
                    note = alive.status(now, started) + ("" if watched.synced else "   syncing...")
                    live.update(frame(watched.records(), view, now, note, console.width), refresh=True)
                    redraw = False
                    deadline = time.monotonic() + interval
                pressed = key(0.2)
                if pressed in ("q", "\x03"):
                    break
                if pressed == "s":
                    view.sort = (view.sort + 1) % len(SORTS)
                elif pressed == "j":
                    view.selected += 1
                elif pressed == "k":
                    view.selected = max(0, view.selected - 1)
                elif pressed == "e":
                    if view.explain is None and view.held_keys:
                        view.explain = _explanation(opened, view.held_keys[min(view.selected, len(view.held_keys) - 1)])
                    else:
                        view.explain = None
                redraw = redraw or bool(pressed)
    except KeyboardInterrupt:
        pass
    finally:
        alive.stop()
        watched.stop()

"""What a scrape reads of a large cluster, kept from the cache's changes: the usage gauges and the per-holder series,
the queue gauges, and each pool's fragmentation.

A scrape must not cost the cluster's size. The holdings are kept node by node and Workload by Workload in a
:class:`~gpuctl.core.usage.UsageBook`, each node's ``gpuctl_card_holder`` lines and each Workload's
``gpuctl_workload_reserved_card_equivalents`` line as exposition text beside them; the gate each Workload is held at
and the pending Workloads per ClusterQueue in a :class:`QueueBook`; each pool's free capacity and fits node by node
in a :class:`~gpuctl.core.fragmentation.FragmentationBook`. An update reads again only the nodes and Workloads the
cache's change log names since the last (their Devices, Node, Pods or Workloads changed); a change of the pools, the
LocalQueues or a pool's set of shapes, a Node store that becomes or stops being empty, or a change log that forgot
what it held, reads everything again. Either way the result is the same, byte for byte.

Records are read in short holds of the cache's lock (:func:`gathered`) and everything is computed from them outside
it: while a large cluster is read again, the cache keeps applying its watch events and the webhooks keep reading it
(a watch not read for seconds is closed by the API server, and a webhook that waits past its timeout fails closed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

from gpuctl.cluster import kinds
from gpuctl.core.explain import held_at
from gpuctl.core.fragmentation import FragmentationBook, Shape, ViewFragmentation
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.pods import Pod
from gpuctl.core.queueing import cluster_queue_of, order_key, pending
from gpuctl.core.usage import (
    HOLDER_LABELS,
    RESERVED_LABELS,
    UsageBook,
    holder_rows,
    owners_of,
    reserved_rows,
)
from gpuctl.core.views import in_pool
from gpuctl.core.workloads import LocalQueue, Workload
from gpuctl.operator.cache import OperatorCache
from gpuctl.operator.metrics import (
    HOLDER,
    HOLDER_HELP,
    RESERVED_BY_WORKLOAD,
    RESERVED_BY_WORKLOAD_HELP,
    QueueState,
    family_header,
    sample_lines,
)

Held = dict[tuple[str, str, str], float]
K = TypeVar("K")
Reserved = dict[tuple[str, str], float]


class UsageText:
    """The usage book of one cache, its holder and reservation lines, and what they were last brought up to."""

    def __init__(self, cache: OperatorCache) -> None:
        self.cache = cache
        self.book: UsageBook | None = None
        self._lock = threading.Lock()
        self._serial = 0
        self._nodes_known = False
        self._holders: dict[str, bytes] = {}
        self._reserved: dict[tuple[str, str], bytes] = {}
        self.read = (0, 0)
        """Nodes and Workloads read again by the last update."""

    def update(self) -> tuple[Held, Reserved, bytes]:
        """Bring the book up to the cache; the usage gauges and the text of the two families. The records are
        read in short holds of the cache's lock (:func:`gathered`), the holdings computed outside it."""
        cache = self.cache
        with self._lock:
            with cache.lock:
                instancetypes = [c.record for c in cache.store(kinds.INSTANCETYPE).values()]
                local_queues = list(cache.store(kinds.LOCALQUEUE).values())
                nodes_known = bool(cache.store(kinds.NODE))
                key = UsageBook.reads(instancetypes, local_queues)
                book = self.book
                changed = (
                    cache.changes.since(self._serial)
                    if book is not None and book.key == key and nodes_known == self._nodes_known
                    else None
                )
                serial = cache.changes.serial
                if changed is None:
                    nodes = set(cache.store(kinds.DEVICES)) | set(cache.pods_by_node)
                    workloads = set(cache.workloads_by_owner) | set(cache.pods_by_workload)
                else:
                    nodes, workloads = changed
            try:
                book, text = self._bring_up(
                    book if changed is not None else None, nodes, workloads, instancetypes, local_queues
                )
            except BaseException:
                self.book = None  # half brought up: the next update reads everything again
                raise
            # Only now: what changed while a failed update read is read again by the next.
            self._serial, self._nodes_known = serial, nodes_known
            held, reserved = book.gauges()
        return held, reserved, text

    def _bring_up(
        self,
        book: UsageBook | None,
        nodes: set[str],
        workloads: set[str],
        instancetypes: list[InstanceType],
        local_queues: list[LocalQueue],
    ) -> tuple[UsageBook, bytes]:
        """Read ``nodes`` and ``workloads`` again into ``book`` (a new one when None); the book and the two
        families' text."""
        cache = self.cache
        raw_nodes = gathered(cache, sorted(nodes), lambda n: (n, cache.served_devices(n), *self._pods_and_owners(n)))
        raw_workloads = gathered(cache, sorted(workloads), lambda o: (o, cache.workloads_owning(o), cache.pods_of(o)))
        node_records = [(node, d, pods, _owners(owning)) for node, d, pods, owning in raw_nodes]
        workload_records = [(owner, _owner(owner, owning), pods) for owner, owning, pods in raw_workloads]
        if book is None:
            book = self.book = UsageBook(instancetypes, local_queues)
            self._holders, self._reserved = {}, {}
        for node, d, pods, owners in node_records:
            found = book.set_node(node, d, pods, owners)
            _keep(self._holders, node, sample_lines(HOLDER, HOLDER_LABELS, holder_rows(found)))
        for owner, w, pods in workload_records:
            namespace, _, name = owner.partition("/")
            h = book.set_workload((namespace, name), w, pods)
            rows = reserved_rows([h] if h is not None else [])
            _keep(self._reserved, (namespace, name), sample_lines(RESERVED_BY_WORKLOAD, RESERVED_LABELS, rows))
        self.read = (len(node_records), len(workload_records))
        text = b"".join(
            (
                family_header(HOLDER, HOLDER_HELP),
                *(self._holders[n] for n in sorted(self._holders)),
                family_header(RESERVED_BY_WORKLOAD, RESERVED_BY_WORKLOAD_HELP),
                *(self._reserved[k] for k in sorted(self._reserved)),
            )
        )
        return book, text

    def _pods_and_owners(self, node: str) -> tuple[list[Pod], dict[str, list[Workload]]]:
        """The Pods bound to ``node`` and the Workloads each of their owners (``namespace/name``) names (under the
        cache's lock: records only, nothing computed)."""
        pods = self.cache.pods_on(node)
        owning = {
            o: self.cache.workloads_owning(o) for o in {f"{p.namespace}/{p.workload}" for p in pods if p.workload}
        }
        return pods, owning


def _owner(owner: str, owning: list[Workload]) -> Workload | None:
    """The Workload Pods naming ``owner`` (``namespace/name``) belong to, among those that name it, as
    :func:`owners_of` finds it."""
    namespace, _, name = owner.partition("/")
    return owners_of(owning).get((namespace, name))


def _owners(owning: dict[str, list[Workload]]) -> dict[tuple[str, str], Workload]:
    out = {}
    for owner, found in owning.items():
        w = _owner(owner, found)
        if w is not None:
            out[(w.namespace, w.pod_owner)] = w
    return out


GATHERED_PER_HOLD = 500
"""Keys whose records are read per hold of the cache's lock: the cache applies its watch events (and the webhooks
read it) between two holds, however large the cluster."""

R = TypeVar("R")


def gathered(cache: OperatorCache, keys: list[K], read: Callable[[K], R]) -> list[R]:
    """``read(key)`` for every key, :data:`GATHERED_PER_HOLD` keys per hold of the cache's lock: records only (what
    is computed from them is computed outside the lock). What changes between two holds is in the change log, read
    again by the next update."""
    out: list[R] = []
    for i in range(0, len(keys), GATHERED_PER_HOLD):
        with cache.lock:
            out.extend(read(k) for k in keys[i : i + GATHERED_PER_HOLD])
    return out


def _keep(blocks: dict[K, bytes], key: K, lines: bytes) -> None:
    if lines:
        blocks[key] = lines
    else:
        blocks.pop(key, None)


class QueueBook:
    """Per ClusterQueue its pending Workloads (in Kueue's order, the head first), and the Workloads held per queue
    and gate (:func:`gpuctl.core.explain.held_at`, as ``top`` and ``workloads --held`` count them), kept Workload by
    Workload."""

    def __init__(self, cache: OperatorCache) -> None:
        self.cache = cache
        self._serial = 0
        self._local: dict[tuple[str, str], str] | None = None
        self._entries: dict[str, dict[str, tuple[str, int | None, bool]]] = {}
        """Per ``namespace/name`` Pods carry: its Workloads' queue, the gate that holds each, whether it is pending."""
        self._held: dict[tuple[str, str], int] = {}
        self._pending: dict[str, dict[str, Workload]] = {}
        self._checks: dict[str, tuple[str, tuple[tuple[str, str, str], ...]]] = {}
        """Per Workload held at gate 3: its ClusterQueue and every AdmissionCheck on it (name, state, message)."""
        self._lock = threading.Lock()

    def update(self) -> None:
        """Bring the book up to the cache: only the Workloads that changed are judged again (all of them when the
        LocalQueues changed), their records read in short holds of the cache's lock and judged outside it."""
        cache = self.cache
        with self._lock:
            with cache.lock:
                local = {(q.namespace, q.name): q.cluster_queue for q in cache.store(kinds.LOCALQUEUE).values()}
                changed = cache.changes.since(self._serial) if local == self._local else None
                serial = cache.changes.serial
                if changed is None:
                    owners = set(cache.workloads_by_owner) | set(cache.pods_by_workload)
                else:
                    owners = changed[1]
            if changed is None:
                self._local, self._entries, self._held, self._pending, self._checks = local, {}, {}, {}, {}
            try:
                records = gathered(cache, sorted(owners), lambda o: (o, cache.pods_of(o), cache.workloads_owning(o)))
                for owner, pods, owning in records:
                    self._owner(owner, pods, owning, local)
            except BaseException:
                self._local = None  # half brought up: the next update judges everything again
                raise
            self._serial = serial

    def _owner(self, owner: str, pods: list[Pod], owning: list[Workload], local: dict[tuple[str, str], str]) -> None:
        for key, (cq, gate, waiting) in self._entries.pop(owner, {}).items():
            if gate is not None:
                self._count((cq, str(gate)), -1)
            if waiting:
                self._pending[cq].pop(key, None)
            self._checks.pop(key, None)
        entries = {}
        for w in owning:
            cq = cluster_queue_of(w, local)
            gate = held_at(w, pods) if cq else None
            if gate is not None:
                self._count((cq, str(gate)), 1)
            waiting = pending(w)
            if waiting:
                self._pending.setdefault(cq, {})[w.key] = w
            if gate == 3 and w.checks:
                self._checks[w.key] = (cq, tuple((c.name, c.state, c.message) for c in w.checks))
            entries[w.key] = (cq, gate, waiting)
        if entries:
            self._entries[owner] = entries

    def _count(self, key: tuple[str, str], sign: int) -> None:
        n = self._held.get(key, 0) + sign
        if n:
            self._held[key] = n
        else:
            del self._held[key]

    def pending_order(self, cluster_queue: str) -> list[Workload]:
        """The pending Workloads of one ClusterQueue in Kueue's order (:func:`gpuctl.core.queueing.pending_order`)."""
        with self._lock:
            waiting = dict(self._pending.get(cluster_queue, {}))
        return sorted((waiting[k] for k in sorted(waiting)), key=order_key)

    def state(self, cluster_queues: Iterable[str]) -> QueueState:
        """Per ClusterQueue of ``cluster_queues`` its pending count and head, and the Workloads held per queue and
        gate, for the cache's Workloads as last updated."""
        lines = {cq: self.pending_order(cq) for cq in cluster_queues}
        with self._lock:
            held = dict(self._held)
            checks = dict(self._checks)
        return QueueState({cq: (len(line), line[0] if line else None) for cq, line in lines.items()}, held, checks)


class PoolFragmentation:
    """One pool's :class:`~gpuctl.core.fragmentation.FragmentationBook`, kept up to the cache's ledgers."""

    def __init__(self, cache: OperatorCache) -> None:
        self.cache = cache
        self.book: FragmentationBook | None = None
        self._lock = threading.Lock()
        self._serial = 0
        self._reads: object = None

    def update(self, it: InstanceType, shapes: list[Shape]) -> tuple[ViewFragmentation, ...]:
        """The pool's views against ``shapes``, its nodes' cards read again where they changed."""
        cache = self.cache
        model = it.accelerator_group
        selector = it.pool_labels()
        with self._lock:
            with cache.lock:
                reads = (FragmentationBook.reads(model, shapes, it.card_mib), selector, bool(cache.store(kinds.NODE)))
                book = self.book
                changed = cache.changes.since(self._serial) if book is not None and reads == self._reads else None
                serial = cache.changes.serial
                nodes = set(cache.devices_by_model.get(model, ())) if changed is None else changed[0]
            if book is None or changed is None:
                book = self.book = FragmentationBook(model, shapes, it.card_mib)
                self._reads = reads
            try:
                for node, d in gathered(cache, sorted(nodes), lambda n: (n, cache.served_devices(n))):
                    g = d.group(model) if d is not None and in_pool(d.labels, selector) else None
                    book.set_node(node, g.cards if g is not None else None)
            except BaseException:
                self.book = None  # half brought up: the next update reads every node again
                raise
            self._serial = serial
            return book.views(shapes)

"""The checks of the pools and of work that is stuck: each InstanceType's queue, its published status against the
views the core computes from its ledgers, inactive pools, Devices objects without a Node, Workloads held longer than
the check retries, and draining pools whose Instances are not stopped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpuctl.core import naming
from gpuctl.core.doctor.records import FAIL, RETRY_MINUTES, WARN, Finding, duration_text, shell_word, show
from gpuctl.core.instances import Instance
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import NodeDevices
from gpuctl.core.nodes import Node
from gpuctl.core.pods import Pod
from gpuctl.core.queueing import epoch_seconds
from gpuctl.core.views import in_pool
from gpuctl.core.workloads import ClusterQueue, LocalQueue, Workload

# ----------------------------------------------------------------------------------------------- pools


INACTIVE_GRACE_SECONDS = 120
"""How long an inactive InstanceType's queue may still admit before it is a finding: the InstanceType reconciler
puts it on Hold within seconds."""


def inactive_pools(
    instancetypes: Mapping[str, InstanceType],
    cluster_queues: Mapping[str, ClusterQueue],
    now: float,
    grace_seconds: float = INACTIVE_GRACE_SECONDS,
    owner_fix: str = "",
) -> list[Finding]:
    """An InstanceType set ``inactive`` whose ClusterQueue still admits once the grace period is over (``owner_fix``:
    the fix where GPUStack's worker owns the queue's stop policy, rather than a patch it would undo)."""
    out = []
    for name, it in sorted(instancetypes.items()):
        cq = cluster_queues.get(name)
        if not it.inactive or cq is None or cq.stop_policy not in ("", "None"):
            continue
        since = epoch_seconds(it.inactive_since) if it.inactive_since else None
        age = None if since is None else now - since
        if age is not None and age < grace_seconds:
            continue
        out.append(
            Finding(
                "pool-inactive",
                FAIL,
                f"InstanceType {name} is inactive"
                + ("" if age is None else f" (set {duration_text(max(age, 0))} ago)")
                + f", yet ClusterQueue {name} admits (stopPolicy {cq.stop_policy or 'None'})",
                "inactive puts the pool's queue on Hold: new workloads wait, running ones keep running; the "
                "InstanceType reconciler does it within seconds, so a queue still admitting means it does not run",
                owner_fix
                or f'kubectl patch clusterqueue {name} --type merge -p \'{{"spec":{{"stopPolicy":"Hold"}}}}\'',
            )
        )
    return out


def pools(
    instancetypes: Mapping[str, InstanceType],
    cluster_queues: Mapping[str, ClusterQueue],
    local_queues: Iterable[LocalQueue],
    devices: Sequence[NodeDevices],
    nodes: Mapping[str, Node],
    writer_fix: str = "",
) -> list[Finding]:
    """Each pool has its entrance label, its ClusterQueue and LocalQueue, published views (whether they are the
    views of its ledger is :mod:`gpuctl.core.shadow`'s to say, with both figures) and a Devices object for every
    node. ``writer_fix``: how to look at the status writer that owns the status (never a patch of it)."""
    out = []
    entrances = {(q.name, q.cluster_queue) for q in local_queues}
    for name, it in sorted(instancetypes.items()):
        if it.labels.get(naming.LABEL_QUEUE_ENTRANCE) != it.expected_entrance:
            out.append(
                Finding(
                    "pool-entrance",
                    FAIL,
                    f"InstanceType {name} carries entrance label "
                    f"{show(it.labels.get(naming.LABEL_QUEUE_ENTRANCE))} (want {it.expected_entrance})",
                    "the Pod webhook finds a pool's card memory by this label; without it every fold is refused",
                    f"kubectl label instancetype {name} {naming.LABEL_QUEUE_ENTRANCE}={it.expected_entrance} --overwrite",
                )
            )
        if name not in cluster_queues or (it.expected_entrance, name) not in entrances:
            what = "ClusterQueue" if name not in cluster_queues else f"LocalQueue {it.expected_entrance}"
            out.append(
                Finding(
                    "pool-queues",
                    FAIL,
                    f"InstanceType {name} has no {what}",
                    "Workloads reach a pool through its entrance LocalQueue and the same-named ClusterQueue",
                    "the worker's queue reconciler derives both from the InstanceType: check its logs; "
                    f"`gpuctl views {name}` names the entrance to use",
                )
            )
        if not it.acceleratable:
            continue
        if not it.published_views:
            out.append(
                Finding(
                    "pool-status",
                    FAIL,
                    f"InstanceType {name} publishes no views",
                    "InstanceType.status carries the four views computed from the Devices ledger; the gateway and "
                    "the Instance webhook read them. Its status writer owns it and writes it while it runs and leads",
                    writer_fix,
                )
            )
        pool = it.pool_labels()
        have = {d.node for d in devices}
        missing = sorted(n for n, node in nodes.items() if in_pool(node.labels, pool) and n not in have)
        if missing:
            out.append(
                Finding(
                    "pool-devices",
                    FAIL,
                    f"pool {name}: node(s) without a Devices object: {', '.join(missing[:5])}",
                    "the check and the views read each node's cards from its Devices ledger",
                    "check the device manager on those nodes",
                )
            )
    return out


def orphaned_devices(orphans: Sequence[NodeDevices]) -> list[Finding]:
    """Each Devices object whose Node is gone: left out of every view, and removed by deleting it."""
    return [
        Finding(
            "orphaned-devices",
            WARN,
            f"orphaned Devices {d.node}: no Node {d.node}, so its {sum(len(g.cards) for g in d.groups)} card(s) "
            "are left out of every view",
            "a gone Node serves nothing (gate 3 holds a Workload assigned to it); its Devices object outlived it, "
            "and a writer that still counted it would publish capacity no node has",
            f"kubectl delete devices {d.node}",
        )
        for d in sorted(orphans, key=lambda d: d.node)
    ]


def unreadable_cards(ledgers: Sequence[NodeDevices]) -> list[Finding]:
    """Each ledger holding a card in an allocation mode gpuctl does not know: that card read as GPUStack's check
    reads it, the rest of the ledger as written."""
    return [
        Finding(
            "unreadable-cards",
            WARN,
            "; ".join(d.unreadable()),
            "the device manager wrote an allocation mode gpuctl does not know (a newer GPUStack's?): gpuctl reads "
            "such a card as GPUStack's check does (whole while it leaves every unit, nothing else), which may not be "
            "what the new mode means",
            f"kubectl get devices {d.node} -o yaml  # and a gpuctl that knows the mode",
        )
        for d in sorted(ledgers, key=lambda d: d.node)
        if d.unreadable()
    ]


# ----------------------------------------------------------------------------------------------- stuck work


def _age_minutes(rfc3339: str, now: float) -> float | None:
    since = epoch_seconds(rfc3339)
    return None if since is None else (now - since) / 60


def stuck(
    workloads: Iterable[Workload], pods: Iterable[Pod], now: float, retry_minutes: int = RETRY_MINUTES
) -> list[Finding]:
    """Workloads the check has held for long, evicted Workloads carrying a verdict, Pods Allocate refused."""
    out = []
    for w in sorted(workloads, key=lambda w: w.key):
        c = w.check(naming.NODE_DEVICES_CHECK)
        if c is None:
            continue
        # Kueue's eviction sets Evicted and resets every check to Pending in one write; a verdict found after it was
        # written in the window before the quota is released, the deadlock the design warns about.
        if w.evicted and c.state in ("Ready", "Retry"):
            out.append(
                Finding(
                    "evicted-verdict",
                    FAIL,
                    f"Workload {w.key} is evicted and still carries the check's {c.state}",
                    "the check never judges an evicted Workload: a verdict written between Kueue's two reset "
                    "writes deadlocks the backoff",
                    f"kubectl -n {w.namespace} patch workloads.kueue.x-k8s.io {w.name} --subresource status --type json -p "
                    + shell_word(
                        [
                            {
                                "op": "test",
                                "path": f"/status/admissionChecks/{w.checks.index(c)}/name",
                                "value": c.name,
                            },
                            {
                                "op": "replace",
                                "path": f"/status/admissionChecks/{w.checks.index(c)}/state",
                                "value": "Pending",
                            },
                        ]
                    ),
                )
            )
        age = _age_minutes(c.last_transition, now) if c.last_transition else None
        if c.state == "Retry" and age is not None and age > retry_minutes:
            out.append(
                Finding(
                    "stuck-retry",
                    WARN,
                    f"Workload {w.key} has been held at gate 3 for {int(age)} min: {c.message}",
                    "a Retry that does not converge is a fragmented node TAS keeps choosing, or room promised away",
                    f"gpuctl explain workload {w.key}; gpuctl simulate --workload {w.key} --suggest",
                )
            )
    for p in sorted(pods, key=lambda p: (p.namespace, p.name)):
        if p.reason == "UnexpectedAdmissionError":
            out.append(
                Finding(
                    "allocate-refused",
                    WARN,
                    f"Pod {p.namespace}/{p.name} failed with UnexpectedAdmissionError: {p.message}",
                    "Allocate refused a card the gates before let through; its owner recreates the Pod",
                    f"gpuctl explain pod {p.namespace}/{p.name}",
                )
            )
    return out


def drain_stopped(
    instances: Iterable[Instance],
    instancetypes: Mapping[str, InstanceType],
    cluster_queues: Mapping[str, ClusterQueue],
) -> list[Finding]:
    """Instances a drain stopped (the operator's stop, told by its field manager) whose pool admits again: a resume
    leaves them stopped, to be started one by one."""
    out = []
    for i in sorted(instances, key=lambda i: (i.namespace, i.name)):
        if not i.stop or i.stopped_by != naming.INSTANCE_STOP_MANAGER:
            continue
        it, cq = instancetypes.get(i.type), cluster_queues.get(i.type)
        if it is None or it.deleting or it.inactive or cq is None or cq.stop_policy not in ("", "None"):
            continue
        out.append(
            Finding(
                "drain-stopped",
                WARN,
                f"Instance {i.namespace}/{i.name} was stopped by the drain of {i.type}, which admits again",
                "resuming a pool leaves the Instances its drain stopped stopped; each is started on purpose",
                f"gpuctl instance start {i.name} -n {i.namespace}",
            )
        )
    return out


def placement_loops(
    raw_tas: bool, instancetypes: Mapping[str, InstanceType], nodes: Mapping[str, Node], pods: Iterable[Pod]
) -> list[Finding]:
    """The nodes of accelerated pools where Kueue's TAS will place Workloads the check refuses, before anyone
    submits one: on a Kueue whose TAS charges admitted Workloads in credits (0.17), a node whose cards Pods outside
    Kueue hold never looks full to it, so whole-card Workloads are placed there after every eviction."""
    if raw_tas:
        return []
    outside: dict[str, list[str]] = {}
    for p in pods:
        if p.node_name and not p.workload and p.allocations and not p.finished:
            outside.setdefault(p.node_name, []).append(f"{p.namespace}/{p.name}")
    out = []
    for node_name, held in sorted(outside.items()):
        node = nodes.get(node_name)
        pools = sorted(
            t.name
            for t in instancetypes.values()
            if node is not None and t.acceleratable and in_pool(node.labels, t.pool_labels())
        )
        if not pools:
            continue
        out.append(
            Finding(
                "placement-loop",
                WARN,
                f"node {node_name} of pool {', '.join(pools)}: cards held by Pods outside Kueue ({', '.join(sorted(held))})",
                "this Kueue's TAS charges admitted Workloads in credits and these Pods in raw device keys, so the node "
                "never looks full to it: it places Workloads there that the check refuses, again after each eviction, "
                "while other nodes stay free (Kueue 0.18 and later count both alike)",
                f"run {', '.join(sorted(held))} through Kueue (a queue-name label), or cordon {node_name} while they "
                "run (kubectl cordon); upgrading Kueue to 0.18 or later ends it",
            )
        )
    return out

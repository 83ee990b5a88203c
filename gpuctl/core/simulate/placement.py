"""Gates 4 and 5 on the working copy: the nodes each Pod is bound to (TAS's assignment, or the first nodes whose
keys hold it), each Pod against its node's capacity keys, and the allocator's cards for each Pod as the Pod
webhook left it.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from gpuctl.core import naming
from gpuctl.core.allocator import FAMILY_MODE, Grant, Refusal, allocate
from gpuctl.core.credits import pod_requests
from gpuctl.core.explain import (
    FAILED,
    HELD,
    NOT_APPLICABLE,
    PASSED,
    Gate,
)
from gpuctl.core.fit import (
    podset_demands,
)
from gpuctl.core.ledger import Card
from gpuctl.core.naming import Family
from gpuctl.core.pods import CardAllocation, Pod
from gpuctl.core.quota import amount_text
from gpuctl.core.requests import slice_units_on_card
from gpuctl.core.simulate.requests import requests_of
from gpuctl.core.simulate.reservation import Reserved
from gpuctl.core.simulate.working_copy import WorkingCopy
from gpuctl.core.tas import Amount, NodeRoom, Room, node_selector
from gpuctl.core.workloads import (
    PodSet,
    Workload,
)


class Placement(WorkingCopy):
    """Gates 4 and 5 on the working copy: the nodes each Pod is bound to, their capacity keys, and the
    allocator's cards."""

    def _schedule(
        self, w: Workload, got: Reserved, specs: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, tuple[tuple[str, int], ...]]:
        """The nodes each PodSet's Pods are bound to: TAS's assignment, or (without one) the first nodes by name
        whose keys hold a Pod — the scheduler's scoring is not modelled."""
        out: dict[str, tuple[tuple[str, int], ...]] = {}
        for ps in w.podsets:
            hosts = got.hosts.get(ps.name)
            if hosts:
                out[ps.name] = hosts
                continue
            fname = got.flavors.get(ps.name)
            flavor = self.state.flavors.get(fname) if fname else None
            per_pod = requests_of(specs.get(ps.name, ps.spec)).slot
            if flavor is not None:
                names = [r.name for r in self._nodes_for(flavor, ps.spec)[0]]
            else:
                selects = node_selector(ps.spec)
                names = [n for n in self.sched if selects(self.labels_of(n))]
            rooms = [NodeRoom(n, self.labels_of(n), self.sched[n]) for n in names]
            placed: list[tuple[str, int]] = []
            left = ps.count
            for room in sorted(rooms, key=lambda r: r.name):
                take = min(left, room.pods_that_fit(per_pod))
                if take > 0:
                    placed.append((room.name, take))
                    left -= take
                if left == 0:
                    break
            out[ps.name] = tuple(placed) if left == 0 else ()
        return out

    def _gate4(
        self, w: Workload, hosts: Mapping[str, tuple[tuple[str, int], ...]], specs: Mapping[str, Mapping[str, Any]]
    ) -> Gate:
        """Each Pod, as the Pod webhook left it, against the keys its node has left."""
        evidence: list[str] = []
        short: list[str] = []
        used: dict[str, dict[str, Amount]] = {}
        for ps in w.podsets:
            per_pod = requests_of(specs.get(ps.name, ps.spec)).slot
            if not hosts.get(ps.name):
                short.append(f"pod set {ps.name}: no node's keys hold its {ps.count} Pod(s)")
                continue
            for node, pods in hosts[ps.name]:
                free = self.sched.get(node) or Room({}, {})
                taken = used.setdefault(node, {})
                for k, v in sorted(per_pod.items()):
                    need = v * pods + taken.get(k, 0)
                    have = free.get(k, 0)
                    if (naming.classify_resource(k) is not None or k in ("cpu", "memory", "pods")) and need > have:
                        short.append(
                            f"{node}: {k}: requests {amount_text(k, Fraction(need))}, {amount_text(k, Fraction(max(have, 0)))} free"
                        )
                    taken[k] = need
                evidence.append(f"{node}: {pods} Pod(s) of {ps.name} fit its keys")
        if short:
            return Gate(
                4,
                HELD,
                "a Pod does not fit its node's capacity keys: it stays Pending on the node TAS assigned",
                tuple(evidence + short),
                "on a TAS queue the Pod is pinned to its assigned node: it waits until that node's keys free up",
            )
        return Gate(4, PASSED, "every Pod fits its node's capacity keys", tuple(evidence))

    def _gate5(
        self,
        w: Workload,
        got: Reserved,
        hosts: Mapping[str, tuple[tuple[str, int], ...]],
        specs: Mapping[str, Mapping[str, Any]],
    ) -> tuple[Gate, list[Pod]]:
        """Allocate, card by card, for each Pod as the Pod webhook left it (a template-built Workload's Pods carry the
        folded units its template lacks; a slice no webhook folded is sized by the memory it asks)."""
        pods: list[Pod] = []
        evidence: list[str] = []
        working: dict[str, dict[tuple[str, str], list[Card]]] = {}
        asked_any = False
        for ps in w.podsets:
            fname = got.flavors.get(ps.name)
            flavor = self.state.flavors.get(fname) if fname else None
            spec = specs.get(ps.name, ps.spec)
            containers = _accelerator_container(spec)
            requests = pod_requests(spec)
            demands = podset_demands(PodSet(ps.name, 1, spec))
            asked_any = asked_any or bool(demands)
            for node, count in hosts.get(ps.name, ()):
                ledger = self.ledgers.get(node)
                for i in range(count):
                    allocations: list[CardAllocation] = []
                    for d in demands:
                        if ledger is None:
                            return (
                                Gate(
                                    5,
                                    FAILED,
                                    f"{node} has no Devices ledger: Allocate has no card to give",
                                    tuple(evidence),
                                ),
                                [],
                            )
                        groups = [
                            g
                            for g in ledger.groups
                            if g.manufacturer == d.manufacturer
                            and (
                                flavor is None
                                or not flavor.accelerator_keys
                                or g.accelerator_key in flavor.accelerator_keys
                            )
                        ]
                        node_cards = working.setdefault(node, {})
                        for g in groups:
                            node_cards.setdefault((g.manufacturer, g.id), list(g.cards))
                        asked = d.shares if d.family is Family.SHARED and d.shares else (d.cards,)
                        for n in asked * (d.pods if d.family in (Family.SLICED, Family.PARTITIONED) else 1):
                            result: tuple[list[Grant], list[Card]] | Refusal = Refusal("-", "no card of the flavor")
                            for g in groups:
                                units = d.units
                                if d.family is Family.SLICED and not units:
                                    units = slice_units_on_card(spec, d.manufacturer, g.memory_mib)
                                result = allocate(
                                    node_cards[(g.manufacturer, g.id)],
                                    d.family,
                                    count=n,
                                    units=units,
                                    profile=d.profile,
                                )
                                if not isinstance(result, Refusal):
                                    grants, after = result
                                    node_cards[(g.manufacturer, g.id)] = after
                                    for grant in grants:
                                        card = next(c for c in g.cards if c.id == grant.card_id)
                                        profile = card.profile(grant.profile) if grant.profile else None
                                        allocations.append(
                                            CardAllocation(
                                                containers.get(d.family, "main"),
                                                g.manufacturer,
                                                g.id,
                                                grant.card_id,
                                                int(FAMILY_MODE[grant.family]),
                                                grant.units,
                                                profile.name if profile else "",
                                            )
                                        )
                                    break
                            if isinstance(result, Refusal):
                                return (
                                    Gate(
                                        5,
                                        FAILED,
                                        f"Allocate refuses a Pod of {ps.name} on {node}: it fails with UnexpectedAdmissionError",
                                        (*tuple(evidence), result.message),
                                        "the gates before let it through because the check does not guard this queue or the kubelet ignored the hint; the owner recreates the Pod",
                                    ),
                                    [],
                                )
                    pod = Pod(
                        namespace=w.namespace,
                        name=f"{w.name}-{ps.name}-{len(pods)}",
                        node_name=node,
                        phase="Running",
                        labels={naming.LABEL_PODSET: ps.name},
                        workload=w.name,
                        podset=ps.name,
                        accelerator_containers=tuple(dict.fromkeys(a.container for a in allocations)),
                        allocations=tuple(allocations),
                        requests=requests,
                        topology_annotated=bool(got.hosts.get(ps.name)),
                    )
                    pods.append(pod)
                    if allocations:
                        evidence.append(
                            f"pod {i + 1} of {ps.name} on {node}: " + ", ".join(a.card_id for a in allocations)
                        )
        if not asked_any:
            return Gate(5, NOT_APPLICABLE, "no container asks for an accelerator: Allocate has nothing to settle"), pods
        return Gate(5, PASSED, "Allocate grants every accelerator container its cards", tuple(evidence)), pods


def _accelerator_container(spec: Mapping[str, Any]) -> dict[Family, str]:
    """The first container asking for each family (its allocation record names it)."""
    out: dict[Family, str] = {}
    for section in ("initContainers", "containers"):
        for c in spec.get(section) or []:
            if not isinstance(c, Mapping):
                continue
            res = c.get("resources")
            for part in ("limits", "requests"):
                values = res.get(part) if isinstance(res, Mapping) else None
                for k in values if isinstance(values, Mapping) else {}:
                    key = naming.classify_resource(str(k))
                    if key is not None and key.family is not None:
                        out.setdefault(key.family, str(c.get("name", "main")))
    return out

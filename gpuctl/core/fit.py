"""Gate 3, the ``gpustack-node-devices`` AdmissionCheck: does each node Kueue assigned hold this Workload's demand,
card by card?

The coarse ``credits`` quota sees one scalar per pool; this check sees every card. It judges a Workload that holds a
quota reservation and is not admitted, evicted, finished or deactivated, and answers ``Ready`` or ``Retry`` — never
``Rejected``. Before fitting, it charges every other Workload on the node that is admitted or holds this check's
``Ready`` but whose Pods ``Allocate`` has not recorded yet, so room promised once is not promised twice.

The fit is greedy and deterministic (nodes by name, cards by index): it may report a false shortage, never false room.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from gpuctl.core import naming, partition_geometry
from gpuctl.core.lazy import OnFirstRead
from gpuctl.core.ledger import Card, Group, Mode, NodeDevices
from gpuctl.core.naming import Family, KeyKind
from gpuctl.core.nodes import Node
from gpuctl.core.pods import Pod
from gpuctl.core.rebuilt import rebuilt_ledgers
from gpuctl.core.units import PERCENT, SHARE, M, QuantityError, parse_quantity
from gpuctl.core.variants import judged
from gpuctl.core.workloads import PodSet, ResourceFlavor, Workload

READY = "Ready"
RETRY = "Retry"
REQUEUE_SECONDS = 30

MSG_READY = "the assigned flavor pool has enough free cards to place the request"
MSG_UNASSIGNED = (
    "the Workload's admission does not resolve to a single accelerator flavor, so no card population can be "
    "resolved; will retry once it does"
)
MSG_UNRESOLVED = (
    "the ResourceFlavor assigned pins no single accelerator key, so which cards of its nodes are its own cannot be "
    "resolved; correct the flavor's node labels (will retry)"
)


# ----------------------------------------------------------------------------------------------- demand


@dataclass(frozen=True, slots=True)
class Demand:
    """What one Pod of a PodSet needs of one manufacturer's cards."""

    podset: str
    family: Family
    manufacturer: str
    cards: int
    """Cards (exclusive, shared), or 1 (a slice, a partition instance)."""
    units: int
    """Per-card units: M for a whole card, M/10 for a share, the folded units of a slice or partition."""
    profile: str = ""
    """Published profile name of a partition."""
    pods: int = 1
    shares: tuple[int, ...] = ()
    """A shared demand's distinct-card count per container, largest first: each container's ``.shared: N`` names N
    distinct cards, and two containers may hold shares on the same card."""

    @property
    def sort_key(self) -> tuple[int, int, str]:
        """Partitions first, then descending per-card units, then family."""
        return (0 if self.family is Family.PARTITIONED else 1, -self.units, self.family.value)

    def describe(self) -> str:
        if self.family is Family.EXCLUSIVE:
            return f"{self.cards} whole card{'s' if self.cards != 1 else ''}"
        if self.family is Family.SHARED:
            if len(self.shares) > 1:
                sets = " and ".join(str(n) for n in self.shares)
                return f"a share on each of {sets} distinct cards (one set per container)"
            return f"a share on each of {self.cards} distinct card{'s' if self.cards != 1 else ''}"
        if self.family is Family.SLICED:
            return f"a slice of {self.units} units ({_pct(self.units)} of a card)"
        return f'a "{self.profile}" partition'


def _pct(units: int) -> str:
    p = Fraction(units, PERCENT)
    return f"{p.numerator} %" if p.denominator == 1 else f"{float(p):.1f} %"


def _container_keys(container: Mapping[str, object]) -> dict[str, object]:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    merged: dict[str, object] = {}
    for section in ("limits", "requests"):  # requests win
        values = resources.get(section)
        if isinstance(values, Mapping):
            merged.update({str(k): v for k, v in values.items()})
    return merged


def _whole(raw: object) -> int:
    if not isinstance(raw, str | int | float):
        return 0
    try:
        q = parse_quantity(raw)
    except QuantityError:
        return 0
    return int(q) if q > 0 else 0


@dataclass(slots=True)
class _Asked:
    cards: int = 0
    units: int = 0
    profiles: set[str] = field(default_factory=set)
    shares: list[int] = field(default_factory=list)


def podset_demands(podset: PodSet) -> list[Demand]:
    """One Demand per manufacturer and family a Pod of this PodSet asks for (init and app containers).

    The family's card key adds to the card count; ``.units`` give the per-card units (the largest of any container);
    a per-profile key names the profile (the smallest name if several). A shared request is judged per container:
    each container's ``.shared: N`` names N distinct cards, so the demand's card count is the largest N (the count
    the fit pin uses) and its ``shares`` list every container's N. Cards scale by the PodSet's count.
    """
    asked: dict[tuple[str, Family], _Asked] = {}
    for section in ("initContainers", "containers"):
        containers = podset.spec.get(section)
        for c in containers if isinstance(containers, list) else []:
            if not isinstance(c, Mapping):
                continue
            for name, raw in _container_keys(c).items():
                key = naming.classify_resource(name)
                if key is None or key.family is None:
                    continue
                a = asked.setdefault((key.manufacturer.name, key.family), _Asked())
                if key.kind is KeyKind.SHARED:
                    n = _whole(raw)
                    if n > 0:
                        a.shares.append(n)
                elif key.kind in (KeyKind.EXCLUSIVE, KeyKind.SLICED, KeyKind.PARTITIONED):
                    a.cards += _whole(raw)
                elif key.kind in (KeyKind.SLICED_UNITS, KeyKind.PARTITIONED_UNITS):
                    a.units = max(a.units, _whole(raw))
                elif key.kind is KeyKind.PARTITIONED_PROFILE and key.profile:
                    a.profiles.add(key.profile)
    out = []
    for (mfr, family), a in asked.items():
        if family is Family.SHARED:
            if a.shares:
                shares = tuple(sorted(a.shares, reverse=True))
                out.append(Demand(podset.name, family, mfr, shares[0], SHARE, "", podset.count, shares))
            continue
        if a.cards <= 0:
            continue
        if family is Family.PARTITIONED:
            out.append(
                Demand(podset.name, family, mfr, 1, a.units, min(a.profiles, default=""), podset.count * a.cards)
            )
        elif family is Family.SLICED:
            out.append(Demand(podset.name, family, mfr, 1, a.units, "", podset.count * a.cards))
        else:
            out.append(Demand(podset.name, family, mfr, a.cards, M, "", podset.count))
    return sorted(out, key=lambda d: d.sort_key)


# ----------------------------------------------------------------------------------------------- working ledger


@dataclass(slots=True)
class _CardState:
    """A card's budget while one verdict is computed (a working copy; the ledger records stay untouched)."""

    node: str
    group: Group
    card: Card
    mode: Mode
    remaining: int
    slots_used: int
    taken_profiles: dict[str, int] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return not self.card.unhealthy

    def free_for(self, profile: str) -> int:
        """Instances of ``profile`` still free here once this verdict's partitions take legal placements (the worst
        of them: a promised partition's placement is not known until Allocate builds it)."""
        if not self.healthy or not self.card.partitioned or self.mode not in (Mode.NONE, Mode.PARTITIONED):
            return 0
        left = max(0, self.card.profile_remaining(profile) - self.taken_profiles.get(profile, 0))
        if not left or not any(n for p, n in self.taken_profiles.items() if p != profile):
            return left
        card = self.card
        wanted = card.profile(profile)
        if wanted is None or not partition_geometry.known_geometry(card.profiles):
            return 0  # another profile carved here, on a card whose layout is unknown: claim nothing more
        names = {p.published: p.name for p in card.profiles}
        after = partition_geometry.remaining_after(
            card.profiles,
            partition_geometry.counts(card.allocated_profiles),
            partition_geometry.counts(card.remaining_profiles) if card.has_ledger else (),
            partition_geometry.counts({names.get(p, p): n for p, n in self.taken_profiles.items()}),
        )
        return 0 if after is None else min(left, dict(after).get(wanted.name, 0))


@dataclass(frozen=True, slots=True)
class Charge:
    """One card charged by a verdict: replaying every charge on the ledger shows what the Workload holds."""

    workload: str
    podset: str
    node: str
    card_id: str
    family: Family
    units: int
    profile: str = ""


class _Budget:
    def __init__(self, devices: Mapping[str, NodeDevices]) -> None:
        self._devices = devices
        self._cards: dict[str, list[_CardState]] = {}

    def node_cards(self, node: str) -> list[_CardState] | None:
        cards = self._cards.get(node)
        if cards is None:
            d = self._devices.get(node)
            if d is None:
                return None
            cards = [_CardState(node, g, c, c.mode, c.remaining, c.allocated_slices) for g in d.groups for c in g.cards]
            self._cards[node] = cards
        return cards


def _covered(state: _CardState, flavor: ResourceFlavor | None, manufacturer: str) -> bool:
    g = state.group
    if g.manufacturer != manufacturer:
        return False
    if flavor is None:
        return True
    keys = flavor.accelerator_keys
    if len(keys) != 1 or keys[0] != g.accelerator_key:
        return False
    pin = flavor.count_pin(keys[0])
    if pin is None:
        return True
    try:
        return int(pin) == len(g.cards)
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class _Shortfall:
    """What a node lacks; the sentence is built only when a message shows it (a pool search tries many nodes)."""

    node: str
    explain: Callable[[], str]

    @property
    def detail(self) -> str:
        return self.explain()


def _describe_cards(states: list[_CardState]) -> str:
    """Why cards are not free: ``all 8 hold slices`` or ``3 hold slices, 1 is exclusive``."""
    reasons: dict[str, int] = {}
    for s in states:
        if s.card.unhealthy:
            r = "unhealthy"
        elif s.card.partitioned:
            r = "partitioned"
        elif s.mode is Mode.SLICED:
            r = "slices"
        elif s.mode is Mode.SHARED:
            r = "shares"
        elif s.mode is Mode.EXCLUSIVE:
            r = "exclusive"
        else:
            continue
        reasons[r] = reasons.get(r, 0) + 1
    words = {
        "slices": "hold slices",
        "shares": "are shared",
        "exclusive": "are held whole",
        "partitioned": "are partitioned",
        "unhealthy": "are unhealthy",
    }
    singular = {
        "slices": "holds slices",
        "shares": "is shared",
        "exclusive": "is held whole",
        "partitioned": "is partitioned",
        "unhealthy": "is unhealthy",
    }
    if len(reasons) == 1:
        [(r, n)] = reasons.items()
        if n == len(states) and n > 1:
            return f"all {n} {words[r]}"
    return ", ".join(
        f"{n} {(singular if n == 1 else words)[r]}" for r, n in sorted(reasons.items(), key=lambda x: -x[1])
    )


def _shared_detail(node: str, open_cards: int, whole: int, asked: int, per_container: bool) -> Callable[[], str]:
    def detail() -> str:
        text = f"{node} has {open_cards} card{'s' if open_cards != 1 else ''} with a free share of {whole}"
        return text + (f" left for a container asking {asked}" if per_container else "")

    return detail


def _fit_pod(
    d: Demand, cards: list[_CardState], flavor: ResourceFlavor | None, node: str, workload: str
) -> list[Charge] | _Shortfall:
    """Place one Pod's demand on one node's cards, charging the budget; or say what is missing there."""
    own = [s for s in cards if _covered(s, flavor, d.manufacturer)]
    if d.family in (Family.EXCLUSIVE, Family.SHARED) and not any(not s.card.partitioned for s in own):
        return _Shortfall(node, lambda: f"{node} has no unpartitioned card of this flavor")
    if d.family is Family.EXCLUSIVE:
        whole = [s for s in own if not s.card.partitioned]
        free = [s for s in whole if s.healthy and s.mode is Mode.NONE and s.remaining >= M]
        if len(free) < d.cards:

            def exclusive_detail() -> str:
                why = _describe_cards([s for s in whole if s not in free])
                return f"{node} has {len(free)} free of {len(whole)}" + (f": {why}" if why else "")

            return _Shortfall(node, exclusive_detail)
        taken = sorted(free, key=lambda s: s.card.index)[: d.cards]
        for s in taken:
            s.mode, s.remaining = Mode.EXCLUSIVE, 0
        return [Charge(workload, d.podset, node, s.card.id, d.family, M) for s in taken]
    if d.family is Family.SHARED:
        whole = [s for s in own if not s.card.partitioned]
        shareable = [s for s in whole if s.healthy and s.mode in (Mode.NONE, Mode.SHARED) and s.remaining >= SHARE]
        taken_here: dict[int, int] = {}  # position in ``shareable`` → shares this Pod takes there
        picks: list[_CardState] = []
        for n in d.shares or (d.cards,):
            # Each container takes its own N distinct cards; a card may serve several containers while shares last.
            open_cards = [
                (s.remaining - SHARE * taken_here.get(i, 0), s.card.index, i)
                for i, s in enumerate(shareable)
                if s.remaining - SHARE * taken_here.get(i, 0) >= SHARE
            ]
            if len(open_cards) < n:
                return _Shortfall(node, _shared_detail(node, len(open_cards), len(whole), n, len(d.shares) > 1))
            for _, _, i in sorted(open_cards)[:n]:
                taken_here[i] = taken_here.get(i, 0) + 1
                picks.append(shareable[i])
        for s in picks:
            s.mode, s.remaining = Mode.SHARED, s.remaining - SHARE
        return [Charge(workload, d.podset, node, s.card.id, d.family, SHARE) for s in picks]
    if d.family is Family.SLICED:
        sliceable = [s for s in own if s.card.sliceable]
        if not sliceable:
            return _Shortfall(node, lambda: f"{node} has no logically sliceable card of this flavor")
        need = max(d.units, 1)
        fits = [
            s
            for s in sliceable
            if s.healthy
            and s.mode in (Mode.NONE, Mode.SLICED)
            and s.slots_used < s.card.logical_slots
            and s.remaining >= need
        ]
        if not fits:

            def slice_detail() -> str:
                open_cards = [s for s in sliceable if s.healthy and s.mode in (Mode.NONE, Mode.SLICED)]
                slotless = [s for s in open_cards if s.slots_used >= s.card.logical_slots]
                best = max((s.remaining for s in open_cards if s not in slotless), default=0)
                detail = f"{node}'s freest card has {best} units ({_pct(best)})"
                if slotless:
                    detail += f"; {len(slotless)} card{'s have' if len(slotless) != 1 else ' has'} no free slice slot"
                others = len(sliceable) - len(open_cards)
                if others:
                    detail += f"; {others} held in another mode"
                return detail

            return _Shortfall(node, slice_detail)
        s = min(fits, key=lambda x: (x.remaining, x.card.index))  # the fullest card that still fits, as Allocate packs
        s.mode, s.remaining, s.slots_used = Mode.SLICED, s.remaining - d.units, s.slots_used + 1
        return [Charge(workload, d.podset, node, s.card.id, d.family, d.units)]
    partitioned = [s for s in own if s.card.partitioned]
    if not partitioned:
        return _Shortfall(node, lambda: f'{node} has no partitioned card for profile "{d.profile}"')
    fits = [s for s in partitioned if s.free_for(d.profile) > 0]
    if not fits:
        return _Shortfall(
            node,
            lambda: (
                f'{node} has no free "{d.profile}" placement on its {len(partitioned)} partitioned card{"s" if len(partitioned) != 1 else ""}'
            ),
        )
    s = min(fits, key=lambda x: (x.free_for(d.profile), x.card.index))
    s.mode = Mode.PARTITIONED
    s.remaining -= d.units
    s.taken_profiles[d.profile] = s.taken_profiles.get(d.profile, 0) + 1
    return [Charge(workload, d.podset, node, s.card.id, d.family, d.units, d.profile)]


# ----------------------------------------------------------------------------------------------- the verdict


@dataclass(frozen=True, slots=True)
class Verdict:
    """The check's answer for one Workload (or why it does not judge it)."""

    judged: bool
    state: str = ""
    message: str = ""
    charges: tuple[Charge, ...] = ()
    inflight: tuple[Charge, ...] = ()
    starved: str = ""
    """The PodSet (role) that does not fit, on Retry."""
    demands: tuple[Demand, ...] = ()

    @property
    def requeue_after_seconds(self) -> int | None:
        return REQUEUE_SECONDS if self.state == RETRY else None


def judgeable(w: Workload) -> str | None:
    """Why the check does not judge this Workload, or None when it does."""
    if not w.active:
        return "the Workload is deactivated"
    if w.finished:
        return "the Workload is finished"
    if w.evicted:
        return "the Workload is evicted; Kueue resets its checks and reservation first, and re-reserving quota re-opens evaluation"
    if w.admitted:
        return "the Workload is already admitted (re-checking would count its own allocation against it)"
    if not w.quota_reserved:
        return "the Workload holds no quota reservation yet"
    return None


LEDGER_REBUILT = "rebuilt"
"""The ledgers were rebuilt from the allocation records of the Pods bound to each node, as the check does."""
LEDGER_PUBLISHED = "published"
"""The ledgers are the published ``Devices.status`` (a read that holds no Pods at all, e.g. a hand-written file)."""


@dataclass(frozen=True, slots=True)
class FitContext:
    """What the check reads: flavors, per-node ledgers, Nodes (None when unknown), other Workloads and Pods.

    Build it with :func:`check_inputs`, which the operator's check and the CLI both call."""

    flavors: Mapping[str, ResourceFlavor]
    devices: Mapping[str, NodeDevices]
    nodes: Mapping[str, Node] | None = None
    workloads: Sequence[Workload] = ()
    pods: Sequence[Pod] = ()
    ledger: str = LEDGER_REBUILT
    held: Mapping[tuple[str, str, str, str], int] | None = None
    """Pods allocated (or finished) per (namespace, Workload, PodSet, node); computed from ``pods`` when None."""
    by_node: Mapping[str, Sequence[Workload]] | None = None
    """The Workloads with a hostname-level assignment on each node (see :func:`workloads_by_node`); None to scan."""
    by_workload: Mapping[tuple[str, str], Sequence[Pod]] | None = None
    """Each Workload's own Pods by (namespace, Workload name), sorted by name (:func:`pods_by_workload`); None to
    scan ``pods``."""

    def own_pods(self, namespace: str, workload: str) -> Sequence[Pod]:
        """The Pods of one Workload (its annotation names it), sorted by name."""
        if self.by_workload is not None:
            return self.by_workload.get((namespace, workload), ())
        return sorted((p for p in self.pods if p.namespace == namespace and p.workload == workload), key=_pod_name)

    def held_pods(self, w: Workload, podset: str, node: str) -> int:
        held = self.held if self.held is not None else held_pod_counts(self.pods)
        return held.get((w.namespace, w.pod_owner, podset, node), 0)


def workloads_by_node(workloads: Iterable[Workload]) -> dict[str, list[Workload]]:
    """Each node and the Workloads whose topology assignment names it: a verdict on a TAS-assigned Workload reads
    only these."""
    out: dict[str, list[Workload]] = {}
    for w in workloads:
        for node in {n for a in w.assignments for n, _ in (a.hostnames or ())}:
            out.setdefault(node, []).append(w)
    return out


def _pod_name(p: Pod) -> str:
    return p.name


def pods_by_workload(pods: Iterable[Pod]) -> dict[tuple[str, str], list[Pod]]:
    """Each Workload's Pods by (namespace, Workload name), sorted by name: explaining every Workload of a large
    cluster reads its own Pods from here rather than scanning every Pod for each."""
    out: dict[tuple[str, str], list[Pod]] = {}
    for p in pods:
        if p.workload:
            out.setdefault((p.namespace, p.workload), []).append(p)
    for owned in out.values():
        owned.sort(key=_pod_name)
    return out


def held_pod_counts(pods: Iterable[Pod]) -> dict[tuple[str, str, str, str], int]:
    """How many Pods of each Workload's PodSet each node holds: allocated by ``Allocate``, or finished (its cards
    were charged, and the kubelet took them back)."""
    out: dict[tuple[str, str, str, str], int] = {}
    for p in pods:
        if p.workload and p.node_name and (p.held or p.finished):
            key = (p.namespace, p.workload, p.podset, p.node_name)
            out[key] = out.get(key, 0) + 1
    return out


def check_inputs(
    flavors: Mapping[str, ResourceFlavor],
    devices: Mapping[str, NodeDevices] | Iterable[NodeDevices],
    nodes: Mapping[str, Node] | None,
    workloads: Iterable[Workload],
    pods: Iterable[Pod],
    *,
    pods_read: bool = True,
) -> FitContext:
    """The check's inputs, the one way both the operator and the CLI build them.

    ``devices`` are the ledgers, or the ledgers by node (a mapping may parse each when it is first read).

    - Every node's ledger is rebuilt from the Pods bound to it with the device manager's aggregation (never the
      published ``Devices.status``), from the same read as the held Pods, so no Pod is counted twice or missed;
      each is rebuilt when a verdict first reads it (:func:`~gpuctl.core.rebuilt.rebuilt_ledgers`).
    - Every Workload counts, whatever its ClusterQueue: two InstanceTypes (a derived and a custom one) can serve the
      same cards through different queues, so one queue's in-flight Workloads take room from the other's.

    ``pods_read=False`` says the read holds no Pods at all (a hand-written snapshot): the published ledgers are used
    as they are, and the context says so (``ledger`` is :data:`LEDGER_PUBLISHED`).
    """
    pods = tuple(pods)
    workloads = tuple(judged(workloads))  # a Concurrent Admission parent's status copies its admitted Variant's
    published = devices if isinstance(devices, Mapping) else {d.node: d for d in devices}
    ledgers: Mapping[str, NodeDevices] = rebuilt_ledgers(published, pods) if pods_read else published
    return FitContext(
        flavors,
        ledgers,
        nodes,
        tuple(workloads),
        pods,
        LEDGER_REBUILT if pods_read else LEDGER_PUBLISHED,
        OnFirstRead(lambda: held_pod_counts(pods)),
        OnFirstRead(lambda: workloads_by_node(workloads)),
        pods_by_workload(pods),
    )


def _role_clause(w: Workload, podsets: Iterable[str]) -> str:
    if len(w.podsets) <= 1:
        return ""
    names = sorted(set(podsets))
    return f' for role "{names[0]}"' if len(names) == 1 else " for roles " + ", ".join(f'"{n}"' for n in names)


def _pool_nodes(flavor: ResourceFlavor, ctx: FitContext) -> list[str]:
    if ctx.nodes is not None:
        return sorted(
            n.name for n in ctx.nodes.values() if all(n.labels.get(k) == v for k, v in flavor.node_labels.items())
        )
    selector = flavor.device_selector
    return sorted(name for name, d in ctx.devices.items() if all(d.labels.get(k) == v for k, v in selector.items()))


def _charge_inflight(w: Workload, ctx: FitContext, budget: _Budget) -> list[Charge]:
    """Charge the Pods of an admitted (or check-Ready) Workload that Allocate has not recorded yet."""
    charges: list[Charge] = []
    for ps in w.podsets:
        a = w.assignment(ps.name)
        hosts = a.hostnames if a else None
        if a is None or hosts is None:
            continue  # not counted without a hostname-level assignment
        flavors = a.credit_flavors
        flavor = ctx.flavors.get(flavors[0]) if len(flavors) == 1 else None
        for node, pods in hosts:
            cards = budget.node_cards(node)
            if cards is None:
                continue
            missing = max(0, pods - ctx.held_pods(w, ps.name, node))
            for d in podset_demands(PodSet(ps.name, 1, ps.spec)):
                for _ in range(missing * d.pods):
                    got = _fit_pod(
                        replace(d, pods=1),
                        cards,
                        flavor,
                        node,
                        w.key,
                    )
                    if isinstance(got, list):
                        charges.extend(got)
    return charges


def promised(ctx: FitContext, *, check: str = naming.NODE_DEVICES_CHECK) -> list[Charge]:
    """Every card the check counts as promised: the Pods of each admitted (or check-Ready) Workload that Allocate has
    not recorded yet, charged in the order and by the rule a verdict charges them (what a what-if must not hand out
    again)."""
    budget = _Budget(ctx.devices)
    out: list[Charge] = []
    for w in sorted(ctx.workloads, key=lambda x: x.key):
        if _holds_promise(w, check):
            out.extend(_charge_inflight(w, ctx, budget))
    return out


def _holds_promise(w: Workload, check: str) -> bool:
    """Admitted, or answered Ready by the check on its reservation, and still live: its cards are held before its
    Pods hold them (a finished, evicted or deactivated one's Pods are gone or going; the ledger holds what they
    still have)."""
    if w.finished or w.evicted or not w.active:
        return False
    state = w.check(check)
    return w.admitted or (w.quota_reserved and state is not None and state.state == READY)


def _judged_nodes(w: Workload) -> set[str] | None:
    """The nodes a verdict reads when every PodSet is TAS-assigned to hostnames; None when it reads whole pools."""
    nodes: set[str] = set()
    for ps in w.podsets:
        a = w.assignment(ps.name)
        hosts = a.hostnames if a else None
        if not hosts:
            return None
        nodes.update(n for n, _ in hosts)
    return nodes


def _on_nodes(w: Workload, nodes: set[str]) -> bool:
    return any(n in nodes for a in w.assignments for n, _ in (a.hostnames or ()))


def judge_workload(w: Workload, ctx: FitContext, *, check: str = naming.NODE_DEVICES_CHECK) -> Verdict:
    """The gate-3 verdict for one Workload."""
    why_not = judgeable(w)
    if why_not:
        return Verdict(False, message=why_not)
    budget = _Budget(ctx.devices)
    inflight: list[Charge] = []
    judged = _judged_nodes(w)
    if judged is not None and ctx.by_node is not None:
        candidates: Iterable[Workload] = {x.key: x for n in judged for x in ctx.by_node.get(n, ())}.values()
    else:
        candidates = ctx.workloads
    for other in sorted(candidates, key=lambda x: x.key):
        if other.key == w.key:
            continue
        if judged is not None and not _on_nodes(other, judged):
            continue  # charges on nodes this verdict does not judge cannot change it
        if _holds_promise(other, check):
            inflight.extend(_charge_inflight(other, ctx, budget))
    all_demands: list[tuple[PodSet, Demand]] = [(ps, d) for ps in w.podsets for d in podset_demands(ps)]
    all_demands.sort(key=lambda x: x[1].sort_key)
    charges: list[Charge] = []
    for ps, d in all_demands:
        a = w.assignment(ps.name)
        flavors = a.credit_flavors if a else []
        if len(flavors) != 1:
            return Verdict(
                True,
                RETRY,
                MSG_UNASSIGNED + _role_clause(w, [ps.name]),
                inflight=tuple(inflight),
                starved=ps.name,
                demands=tuple(d for _, d in all_demands),
            )
        flavor = ctx.flavors.get(flavors[0])
        if flavor is None or len(flavor.accelerator_keys) != 1:
            return Verdict(
                True,
                RETRY,
                MSG_UNRESOLVED + _role_clause(w, [ps.name]),
                inflight=tuple(inflight),
                starved=ps.name,
                demands=tuple(d for _, d in all_demands),
            )
        result = _fit_demand(w, ps, d, flavor, a.hostnames if a else None, ctx, budget)
        if isinstance(result, str):
            return Verdict(
                True,
                RETRY,
                f"role {ps.name!r}: " + result if len(w.podsets) > 1 else result,
                charges=tuple(charges),
                inflight=tuple(inflight),
                starved=ps.name,
                demands=tuple(d for _, d in all_demands),
            )
        charges.extend(result)
    if any(d.family is Family.PARTITIONED for _, d in all_demands):
        profiles = sorted({d.profile for _, d in all_demands if d.family is Family.PARTITIONED})
        message = (
            f'the assigned flavor pool has enough partitioned cards with a free "{profiles[0]}" placement'
            if len(profiles) == 1
            else MSG_READY
        )
    else:
        message = MSG_READY
    return Verdict(
        True,
        READY,
        message + _role_clause(w, [p.name for p in w.podsets]),
        tuple(charges),
        tuple(inflight),
        demands=tuple(d for _, d in all_demands),
    )


def _fit_demand(
    w: Workload,
    ps: PodSet,
    d: Demand,
    flavor: ResourceFlavor,
    hosts: list[tuple[str, int]] | None,
    ctx: FitContext,
    budget: _Budget,
) -> list[Charge] | str:
    """Fit every Pod of a demand: on its TAS-assigned node, or on any node of the flavor's pool."""
    charges: list[Charge] = []
    one = replace(d, pods=1)
    per_pod = max(1, d.pods // max(ps.count, 1))
    if hosts is not None:
        for node, pods in hosts:
            if ctx.nodes is not None and node not in ctx.nodes:
                return f"needs {one.describe()} on {node}, whose Node object is gone; will retry as capacity frees"
            cards = budget.node_cards(node)
            if cards is None:
                return f"needs {one.describe()} on {node}, which has no Devices ledger; will retry as capacity frees"
            for i in range(pods * per_pod):
                got = _fit_pod(one, cards, flavor, node, w.key)
                if isinstance(got, _Shortfall):
                    which = f" (pod {i // per_pod + 1} of {pods} there)" if pods > 1 else ""
                    return f"needs {one.describe()}{which}, {got.detail}; will retry as capacity frees"
                charges.extend(got)
        return charges
    nodes = _pool_nodes(flavor, ctx)
    for i in range(d.pods):
        tried: list[_Shortfall] = []
        for node in nodes:
            cards = budget.node_cards(node)
            if cards is None:
                continue
            got = _fit_pod(one, cards, flavor, node, w.key)
            if isinstance(got, list):
                charges.extend(got)
                break
            tried.append(got)
        else:
            shown = "; ".join(s.detail for s in tried[:3]) + (f"; and {len(tried) - 3} more" if len(tried) > 3 else "")
            where = f" ({shown})" if tried else f" (flavor {flavor.name} selects no node with a Devices ledger)"
            return f"no node in the assigned flavor pool currently has {one.describe()} free for pod {i + 1}{where}; will retry as capacity frees"
    return charges

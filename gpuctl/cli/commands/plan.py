"""``gpuctl plan partitions|drain``: which cards to re-mode, and what a node drain evicts and where it goes — every
step simulated before anyone touches a card."""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.errors import AnswerNo, UsageError
from gpuctl.cli.names import complete_instancetypes, complete_nodes
from gpuctl.cli.options import KueueVersionOption
from gpuctl.cli.options import kueue_version as read_kueue_version
from gpuctl.cli.registry import OutputFlags, SourceFlags, command, group
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cluster import kinds
from gpuctl.cluster.errors import NotFound

if TYPE_CHECKING:
    from gpuctl.cluster.read import Source
    from gpuctl.core.instancetypes import InstanceType
    from gpuctl.core.plan import DrainPlan, PartitionPlan
    from gpuctl.core.simulate import Simulator
    from gpuctl.core.versions import KueueVersion

group(
    "plan",
    summary="Plan card re-modes and node drains, each step proven by simulation.",
    help="Plan card re-modes and node drains, each step proven by simulation.",
    examples="""
  gpuctl plan partitions gpustack--nvidia-h100-80gb-hbm3-linux-amd64
  gpuctl plan drain h100-1 --exit-code""",
    listed=45,
)

PARTITION_COLUMNS = (
    Column("STEP"),
    Column("NODE"),
    Column("CARDS"),
    Column("TO"),
    Column("FIRST"),
    Column("ADMITS"),
    Column("DETAIL", wide_only=True),
)
DRAIN_COLUMNS = (
    Column("STEP"),
    Column("NODE"),
    Column("EVICTED"),
    Column("CARDS"),
    Column("GOES"),
    Column("WHY", wide_only=True),
)


def _views_cell(v: dict[str, Any]) -> str:
    return " ".join(
        f"{v[k]['onceMaxRequest']}/{v[k]['remaining']}"
        for k in ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned")
    )


def _profiles_cell(v: dict[str, Any]) -> str:
    return ", ".join(f"{p['name']} {p['count']}" for p in v["acceleratorPartitioned"]["remainingProfiles"]) or "none"


def _cost_text(c: dict[str, dict[str, int]]) -> str:
    """What a plan takes from the views' capacity: ``EX -3 cards, SH -30 shares, SL -300 %, PT +21 instances``."""
    ex, sh, sl, pt = (c[k] for k in ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned"))
    return (
        f"EX {ex['capacity']:+d} cards, SH {sh['capacity']:+d} shares, SL {sl['capacity']:+d} %, "
        f"PT {pt['capacity']:+d} instances"
    )


# ----------------------------------------------------------------------------------------------- partitions


def _pool(sim: "Simulator", name: str) -> "InstanceType":
    it = sim.state.instancetypes.get(name)
    if it is None or not it.acceleratable:
        known = ", ".join(sorted(n for n, t in sim.state.instancetypes.items() if t.acceleratable)) or "none"
        raise NotFound(f'instancetype "{name}" not found or not accelerated (accelerated pools: {known})')
    if name not in sim.state.cluster_queues:
        raise NotFound(f"InstanceType {name} has no ClusterQueue: nothing is queued on it (`gpuctl doctor` says why)")
    return it


def _entrance_namespace(sim: "Simulator", pool: str, namespace: str | None) -> tuple[str, str]:
    """The namespace and LocalQueue ``--for`` demand is submitted through: ``-n``'s, else the first that has one."""
    queues = sorted((ns, name) for (ns, name), lq in sim.state.local_queues.items() if lq.cluster_queue == pool)
    if namespace is not None:
        mine = [q for q in queues if q[0] == namespace]
        if not mine:
            raise UsageError(
                f"namespace {namespace} has no LocalQueue of pool {pool}: give -n a namespace that has one"
            )
        return mine[0]
    if not queues:
        raise UsageError(f"pool {pool} has no LocalQueue in any namespace: nothing can be submitted to it")
    return queues[0]


def partition_plans(
    source: "Source",
    pools: list[str],
    wanted: list[str],
    namespace: str | None,
    kueue: "KueueVersion | None" = None,
) -> tuple[list["PartitionPlan"], dict[str, dict[str, str]]]:
    """Each pool's plan, and every Node's labels (the ``metadata`` of the steps)."""
    from gpuctl.cluster import read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core import modes, plan
    from gpuctl.core.simulate import Simulator

    try:
        specs = [plan.parse_for(w) for w in wanted]
    except plan.PlanError as exc:
        raise UsageError(str(exc)) from None
    if specs and len(pools) != 1:
        raise UsageError("--for asks a demand of one pool: name the pool (gpuctl plan partitions POOL --for ...)")
    with bulk_allocation():
        base = Simulator(read.simulation_state(source, kueue=kueue))
        known = modes.catalog(base.base_devices.values())
        chosen = pools or sorted(
            n
            for n, t in base.state.instancetypes.items()
            if t.acceleratable and n in base.state.cluster_queues and plan.queue_demand(base, n)
        )
        out = []
        for name in chosen:
            it = _pool(base, name)
            sim = base.copy()
            if specs:
                ns, entrance = _entrance_namespace(sim, name, namespace)
                try:
                    demand = plan.for_demand(specs, it, ns, entrance)
                except plan.PlanError as exc:
                    raise UsageError(str(exc)) from None
            else:
                demand = plan.demand_of(sim, name)
            out.append(plan.plan_partitions(sim, it, demand, known))
    return out, {n: dict(node.labels) for n, node in base.state.nodes.items()}


def _partition_rows(wide: bool) -> Any:
    def rows(item: dict[str, Any]) -> list[list[str]]:
        first = ", ".join(f"{h['namespace']}/{h['name']}" for h in item["blockedBy"]) or "-"
        admits = [f"{a['namespace']}/{a['name']}" for a in item["admits"]]
        if not wide:
            return [
                [
                    str(item["step"]),
                    item["node"],
                    str(len(item["cards"])),
                    item["to"],
                    first if len(first) <= 24 else f"{len(item['blockedBy'])} Workload(s)",
                    str(len(admits)),
                    "",
                ]
            ]
        out = []
        for i, d in enumerate(item["cardDetail"]):
            after = (
                "free: " + ", ".join(f"{p['name']} {p['count']}" for p in d["freeProfiles"])
                if "freeProfiles" in d
                else f"{d['logicalSlices']} slice slots"
            )
            held = (
                f" ({', '.join(d['heldBy'])} finish{'es' if len(d['heldBy']) == 1 else ''} first)"
                if d["heldBy"]
                else ""
            )
            out.append(
                [
                    str(item["step"]) if i == 0 else "",
                    item["node"] if i == 0 else "",
                    d["card"],
                    d["to"],
                    ", ".join(d["heldBy"]) or "-",
                    (", ".join(admits) or "-") if i == 0 else "",
                    f"was {d['from']}{held}; {after}",
                ]
            )
        return out

    return rows


def _partition_footer(plans: list["PartitionPlan"]) -> str:
    if not plans:
        return "No accelerated pool has Workloads pending (name a pool and --for to plan a demand of your own).\n"
    lines: list[str] = []
    for p in plans:
        lines.append(f"pool {p.pool}: {p.switches} card switch(es), each step simulated")
        lines.append(
            f"  demand:   {len(p.demand)} request(s); {len(p.admitted_before)} admitted now, "
            f"{len(p.admitted_after)} with the plan"
        )
        if p.demand and p.ceiling < len(p.demand):
            first = p.ceiling_why[0] if p.ceiling_why else None
            lines.append(
                f"  ceiling:  {p.ceiling} of {len(p.demand)}: no switch of this pool's cards admits more"
                + (f" ({first[0]} {first[1]})" if first else "")
            )
        if p.steps:
            lines.append(f"  before:   EX/SH/SL/PT {_views_cell(p.views_before)}")
            lines.append(f"  after:    EX/SH/SL/PT {_views_cell(p.views_after)}")
            lines.append(f"  profiles: {_profiles_cell(p.views_after)}")
            lines.append(f"  cost:     {_cost_text(p.summary()['cost'])} (capacity)")
        for key, why in p.still_held:
            lines.append(f"  still held: {key}: {why}")
        for t in p.tried:
            lines.append(f"  tried ({t.kind}): {t.why}")
        if not p.demand:
            lines.append("  nothing is pending in its queue (--for asks a demand of your own)")
        elif not p.steps and not p.still_held:
            lines.append("  every request is admitted as the cards are: no switch needed")
    return "\n".join(lines) + "\n" if lines else ""


@command(
    "plan partitions",
    summary="Show which cards to switch mode so the pending demand is admitted.",
    examples="""
  # Which cards to switch so the queue's Workloads are admitted, each step simulated
  gpuctl plan partitions gpustack--nvidia-h100-80gb-hbm3-linux-amd64

  # For a demand of your own: four 3g.40gb instances and two whole cards; per card with -o wide
  gpuctl plan partitions gpustack--nvidia-h100-80gb-hbm3-linux-amd64 --for 3g.40gb=4 --for ex=2 -o wide

  # Then simulate a manifest against one switch
  gpuctl simulate -f job.yaml --set-mode h100-1/GPU-0003=partitioned""",
    source=SourceFlags(namespace=True),
    output=OutputFlags(sort=False),
)
def partitions_command(
    pool: Annotated[
        str | None,
        typer.Argument(
            metavar="[INSTANCETYPE]",
            help="The pool (default: every accelerated pool with Workloads pending).",
            autocompletion=complete_instancetypes,
        ),
    ] = None,
    wanted: Annotated[
        list[str] | None,
        typer.Option(
            "--for",
            help="A demand instead of the queue's: PROFILE=N partition instances (3g.40gb=4), ex=N whole cards, sh=N"
            " shares, sl=N percent of slice memory; one request each. Repeatable.",
            show_default=False,
        ),
    ] = None,
    kueue_version: KueueVersionOption = None,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Which cards of a pool to switch mode so its pending demand is admitted, each step simulated.

    The fewest switches between whole and partitioned that admit the most of the queue's Workloads (or of --for),
    by each vendor's rule: per step the node and cards, what must finish first, the views before and after and what
    it admits. A layout that admits nothing more is listed as tried, never as a step. Nothing is written."""
    names = refs.object_names([pool] if pool else [], kinds.INSTANCETYPE, what="plan partitions")
    opened = source.open()
    plans, labels = partition_plans(
        opened, names, list(wanted or []), source.namespace, read_kueue_version(kueue_version)
    )
    items = [s.to_dict() for p in plans for s in p.steps]
    listing = render.Listing(
        "PlanStep",
        items,
        PARTITION_COLUMNS,
        ref=lambda i: refs.ObjectRef(kinds.NODE, i["node"], None, labels.get(i["node"], {})),
        empty="No switch admits more of the demand.",
        rows=_partition_rows(output.wide),
        extra={"plans": [p.summary() | {"viewsBefore": p.views_before, "viewsAfter": p.views_after} for p in plans]},
        footer=lambda: _partition_footer(plans),
    )
    render.emit(listing, output)


# ----------------------------------------------------------------------------------------------- drain


TABLE_WIDTH = 80
"""The width the narrow drain table keeps to: GOES names a placement's cards by count when their ids do not fit."""


def _goes(e: dict[str, Any], short: bool) -> str:
    if e["result"] == "readmitted":
        nodes = e["placement"]["nodes"]
        if short:
            return "; ".join(
                f"{n['name']} ({len(n['cards'])} card{'' if len(n['cards']) == 1 else 's'})" for n in nodes
            )
        return "; ".join(f"{n['name']} ({', '.join(n['cards']) or 'no card'})" for n in nodes)
    if e["result"] == "held":
        return f"nowhere: gate {e['heldBy']}" + ("" if short else f" ({e['heldAt']})")
    result = str(e["result"])
    return {"outside-kueue": "outside Kueue", "stopped": "stopped"}.get(result, result)


def _drain_rows(wide: bool, budget: int | None = None) -> Any:
    """The drain table's rows; ``budget`` is the room GOES has in the narrow table (None: no limit)."""

    def rows(item: dict[str, Any]) -> list[list[str]]:
        out = []
        for i, e in enumerate(item["evicted"]):
            goes = _goes(e, False)
            if budget is not None and len(goes) > budget:
                goes = _goes(e, True)
            why = e["why"]
            if wide and e.get("unblockers"):
                why += "; would admit: " + "; ".join(u["change"] for u in e["unblockers"])
            if wide and e.get("tried"):
                why += "; tried: " + "; ".join(f"({t['kind']}) {t['why']}" for t in e["tried"])
            held = e.get("cards", [])
            out.append(
                [
                    str(item["step"]) if i == 0 else "",
                    item["node"] if i == 0 else "",
                    ("" if e["kind"] == "Workload" else f"{e['kind'].lower()} ") + f"{e['namespace']}/{e['name']}",
                    (",".join(held) or "-") if wide else str(len(held)),
                    goes,
                    why,
                ]
            )
        if not out:
            out.append([str(item["step"]), item["node"], "nothing", "-", "-", "no Workload or Pod holds it"])
        return out

    return rows


def _goes_budget(items: list[dict[str, Any]]) -> int:
    """What is left of :data:`TABLE_WIDTH` for GOES, the narrow table's last column, after the columns before it."""
    full = _drain_rows(False)
    lines = [[c.header for c in DRAIN_COLUMNS], *(r for item in items for r in full(item))]
    before = sum(max(len(line[i]) for line in lines) + 3 for i in range(4))
    return TABLE_WIDTH - before


def _drain_footer(p: "DrainPlan") -> str:
    lines = []
    workloads = [e for per in p.evicted for e in per if e.outcome is not None]
    back = [e for e in workloads if e.outcome is not None and e.outcome.admitted]
    nowhere = p.nowhere
    lines.append(
        f"evicted {len(workloads)} Workload(s): {len(back)} re-admitted, {len(nowhere)} nowhere to go"
        + (" (--exit-code exits 3)" if nowhere else "")
    )
    published = {v["name"]: v for v in p.published}
    for i, s in enumerate(p.steps):
        for before, after in zip(s.views_before, s.views_after, strict=True):
            lines.append(f"{s.node}: {before['name']}")
            lines.append(f"  before: EX/SH/SL/PT {_views_cell(before)}")
            lines.append(f"  after:  EX/SH/SL/PT {_views_cell(after)} (without {s.node})")
            if i == 0 and before["name"] in published:
                lines.append(
                    f"  (read from each node's ledger rebuilt from its Pods' allocation records, as gate 3 reads it; "
                    f"the published Devices, which `gpuctl views` reads, give "
                    f"{_views_cell(published[before['name']])})"
                )
    return "\n".join(lines) + "\n"


@command(
    "plan drain",
    summary="Show what draining nodes evicts and where each Workload goes.",
    examples="""
  # What draining n7 evicts, and whether each Workload finds room elsewhere now
  gpuctl plan drain n7

  # In a maintenance script: exit 3 when one would have nowhere to go; what would make room
  gpuctl plan drain n7 n8 --exit-code --suggest -o json""",
    source=SourceFlags(),
    output=OutputFlags(sort=False),
)
def drain_command(
    nodes: Annotated[
        list[str],
        typer.Argument(metavar="NODE...", help="The nodes to drain, in order.", autocompletion=complete_nodes),
    ],
    suggest: Annotated[
        bool,
        typer.Option(
            "--suggest", help="For an evicted Workload with nowhere to go, the smallest changes that would make room."
        ),
    ] = False,
    exit_code: Annotated[
        bool, typer.Option("--exit-code", help="Exit 3 when an evicted Workload would have nowhere to go.")
    ] = False,
    kueue_version: KueueVersionOption = None,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """What draining these nodes evicts, and where each evicted Workload goes now.

    kubectl drain in the working copy: every node cordoned, then node by node its Workloads, Pods outside Kueue and
    Instances evicted, and each Workload queued again and simulated through all five gates on the nodes left: its
    new node and cards, or the gate that holds it (--suggest: what would make room). Nothing is written."""
    from gpuctl.cluster import read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.cluster.errors import SourceError
    from gpuctl.core import plan
    from gpuctl.core.instances import parse_instance
    from gpuctl.core.simulate import Simulator

    names = [refs.split_name(n, (kinds.NODE, kinds.DEVICES), what="plan drain")[1] for n in nodes]
    if len(set(names)) != len(names):
        raise UsageError("a node is named twice: give each node once")
    opened = source.open()
    with bulk_allocation():
        sim = Simulator(read.simulation_state(opened, kueue=read_kueue_version(kueue_version)))
        try:
            instances = [parse_instance(o) for o in opened.list(kinds.INSTANCE)]
        except SourceError as exc:
            if "is not served" not in str(exc):
                raise
            instances = []
        try:
            drained = plan.plan_drain(sim, names, instances=instances, suggest=suggest)
        except plan.PlanError as exc:
            raise NotFound(str(exc)) from None
    labels = {n: dict(node.labels) for n, node in sim.state.nodes.items()}
    items = [s.to_dict() for s in drained.steps]
    listing = render.Listing(
        "PlanStep",
        items,
        DRAIN_COLUMNS,
        ref=lambda i: refs.ObjectRef(kinds.NODE, i["node"], None, labels.get(i["node"], {})),
        rows=_drain_rows(output.wide, None if output.wide else _goes_budget(items)),
        extra={
            "nodes": list(drained.nodes),
            "nowhere": [e.holder.to_dict() for e in drained.nowhere],
            "ledgers": "rebuilt-from-pods",
            "published": list(drained.published),
        },
        footer=lambda: _drain_footer(drained),
    )
    render.emit(listing, output)
    if exit_code and drained.nowhere:
        raise AnswerNo("")

"""``gpuctl fragmentation [POOL...]``: free capacity each request shape can use, what is stranded, and what to move."""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.errors import UsageError
from gpuctl.cli.names import complete_instancetypes
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec, fleet_read
from gpuctl.cluster import kinds
from gpuctl.cluster.errors import NotFound

if TYPE_CHECKING:
    from gpuctl.cluster.read import Source
    from gpuctl.core.fragmentation import Shape, ViewFragmentation

COLUMNS = (
    Column("NAME"),
    Column("VIEW"),
    Column("FREE"),
    Column("SHAPE"),
    Column("USABLE"),
    Column("STRANDED"),
    Column("SCORE"),
    Column("HINT", wide_only=True),
)
NODE_COLUMNS = (
    Column("NAME"),
    Column("NODE"),
    Column("VIEW"),
    Column("FREE"),
    Column("SHAPE"),
    Column("USABLE"),
    Column("STRANDED"),
)
SHORT = {"accelerator": "EX", "acceleratorShared": "SH", "acceleratorSliced": "SL", "acceleratorPartitioned": "PT"}


def _view_dict(v: "ViewFragmentation") -> dict[str, Any]:
    return {
        "unit": v.unit,
        "free": v.free,
        "score": v.score,
        "shapes": [
            {"shape": str(f.shape), "usable": f.usable, "stranded": f.stranded, "requests": f.requests} for f in v.fits
        ],
    }


def pool_items(
    source: "Source", names: list[str], shapes: list["Shape"], free_cards: int | None, by_node: bool
) -> list[dict[str, Any]]:
    """One item per pool (or per pool and node): each view's free capacity against the shapes, and the hints.

    The pools, their ledgers and the Workloads are read first; the whole state the simulator needs (Nodes, Pods,
    every ledger rebuilt) only when a pool needs a hint — when no node of it has the whole cards asked for free."""
    from gpuctl.cluster import read
    from gpuctl.core import views
    from gpuctl.core.fragmentation import EX, Shape, cards_of, demand_shapes, pool_fragmentation, reference_shapes
    from gpuctl.core.queueing import cluster_queues_of, pending_order
    from gpuctl.core.simulate import Simulator
    from gpuctl.core.suggest import defrag_hints
    from gpuctl.core.workloads import parse_local_queue

    read.read_as_records(source, kinds.WORKLOAD, kinds.POD)
    types = [t for t in read.instancetypes(source) if t.acceleratable and (not names or t.name in names)]
    missing = sorted(set(names) - {t.name for t in types})
    if missing:
        raise NotFound(f'instancetype "{missing[0]}" not found or not accelerated (`gpuctl views` lists the pools)')
    _known_profiles(shapes, types)
    devices = read.devices(source) if types else []
    workloads = read.workloads(source) if types else []
    if any(w.quota_reserved and not w.finished for w in workloads):
        devices = _with_promises(source, devices)
    queue_of = cluster_queues_of(workloads, map(parse_local_queue, source.list(kinds.LOCALQUEUE)))
    items: list[dict[str, Any]] = []
    wants_hint: dict[str, tuple[list[str], int]] = {}
    for t in sorted(types, key=lambda t: t.name):
        pool = views.pool_devices(devices, t)  # the published ledgers, as `views` reads them
        waiting = pending_order(workloads, queue_of, t.name)
        asked = shapes or demand_shapes(waiting)
        covered = {s.view for s in asked}
        wanted = asked + [s for s in reference_shapes([p.name for p in t.offered_profiles]) if s.view not in covered]
        if by_node:
            for d in pool:
                per = pool_fragmentation([d], t.accelerator_group, wanted, t.card_mib)
                items.append(
                    {
                        "metadata": refs.devices(d.node, d.labels).metadata(),
                        "name": t.name,
                        "node": d.node,
                        "views": {v.view: _view_dict(v) for v in per if v.fits},
                    }
                )
            continue
        per_view = pool_fragmentation(pool, t.accelerator_group, wanted, t.card_mib)
        k = free_cards or max((s.size for s in wanted if s.view == EX), default=1)
        ex = next((v for v in per_view if v.view == EX), None)
        probe = pool_fragmentation(pool, t.accelerator_group, [Shape(EX, k)], t.card_mib) if ex is not None else ()
        nobody_has_k = any(f.requests == 0 for v in probe if v.view == EX for f in v.fits)
        largest = max(
            (sum(1 for c in cs if not c.partitioned) for cs in cards_of(pool, t.accelerator_group).values()), default=0
        )
        if nobody_has_k and largest >= k:  # some node could hold them, once freed
            wants_hint[t.name] = (sorted(cards_of(pool, t.accelerator_group)), k)
        items.append(
            {
                "metadata": refs.instancetype(t.name, t.labels).metadata(),
                "name": t.name,
                "accelerator": t.accelerator_group,
                "pending": len(waiting),
                "shapesFrom": "--shape" if shapes else ("pending" if asked else "reference"),
                "views": {v.view: _view_dict(v) for v in per_view if v.fits},
                "hints": [],
                "tried": [],
            }
        )
    if wants_hint:
        simulator = Simulator(read.simulation_state(source))
        by_type = {t.name: t for t in types}
        for item in items:
            if item["name"] in wants_hint:
                nodes, k = wants_hint[item["name"]]
                key = by_type[item["name"]].accelerator_group
                hints, tried = defrag_hints(simulator, item["name"], nodes, key, k)
                item["hints"] = [h.to_dict() for h in hints]
                item["tried"] = [h.to_dict() for h in tried]
    return items


def _active(src: Any) -> set[str]:
    from gpuctl.cluster import read
    from gpuctl.core.fleet import ACTIVE

    return {t.name for t in read.instancetypes(src) if t.phase == ACTIVE}


def fleet_items(per: dict[str, list[dict[str, Any]]], active: dict[str, set[str]]) -> list[dict[str, Any]]:
    """Pools summed across clusters (Active members only): free, usable and stranded add up per view and shape; a
    view's score is the members' scores weighted by their free capacity."""
    merged: dict[str, dict[str, Any]] = {}
    for ctx, items in sorted(per.items()):
        for item in items:
            if item["name"] not in active.get(ctx, set()):
                continue
            m = merged.setdefault(item["name"], {"name": item["name"], "clusters": [], "pending": 0, "views": {}})
            m["clusters"].append(ctx)
            m["pending"] += item.get("pending", 0)
            for view, v in item["views"].items():
                mv = m["views"].setdefault(view, {"unit": v["unit"], "free": 0, "weighted": 0.0, "shapes": {}})
                mv["free"] += v["free"]
                mv["weighted"] += v["score"] * v["free"]
                for shape in v["shapes"]:
                    ms = mv["shapes"].setdefault(
                        shape["shape"], {"shape": shape["shape"], "usable": 0, "stranded": 0, "requests": 0}
                    )
                    for f in ("usable", "stranded", "requests"):
                        ms[f] += shape[f]
    out = []
    for name, m in sorted(merged.items()):
        views = {}
        for view, mv in m["views"].items():
            score = round(mv["weighted"] / mv["free"], 4) if mv["free"] else 0.0
            views[view] = {
                "unit": mv["unit"],
                "free": mv["free"],
                "score": score,
                "shapes": list(mv["shapes"].values()),
            }
        out.append(
            {"name": name, "clusters": m["clusters"], "pending": m["pending"], "views": views, "hints": [], "tried": []}
        )
    return out


def _hint_text(item: dict[str, Any]) -> str:
    hints = item.get("hints") or []
    if not hints:
        return "-"
    h = hints[0]
    return f"{len(h['workloads'])} to move on {h['node']} frees {h['freeCards']} card(s)"


def _rows(item: dict[str, Any]) -> list[list[str]]:
    out = []
    for view, v in item["views"].items():
        for s in v["shapes"]:
            where = item.get("cluster") or ",".join(item.get("clusters", []))
            row = [f"{where}/{item['name']}" if where else item["name"]]
            if "node" in item:
                row.append(item["node"])
            row += [SHORT[view], f"{v['free']} {'%' if v['unit'].startswith('%') else 'shares'}", s["shape"]]
            row += [str(s["usable"]), str(s["stranded"])]
            if "node" not in item:
                row += [f"{v['score']:.2f}", _hint_text(item) if view == "accelerator" else "-"]
            out.append(row)
    return out


@command(
    "fragmentation",
    summary="Show free capacity each request shape can use, and what is stranded.",
    examples="""
  # Every pool against its pending Workloads' shapes, with hints to free whole cards
  gpuctl fragmentation -o wide

  # One pool against shapes of your choosing, per node
  gpuctl fragmentation gpustack--nvidia-a10g-linux-amd64 --shape ex=2 --shape sl=60 --by-node""",
    listed=50,
    source=SourceFlags(selectors=True, fleet=True),
    output=OutputFlags(sort=False),
)
def fragmentation_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[INSTANCETYPE]...",
            help="Pools (default: every accelerated one).",
            autocompletion=complete_instancetypes,
        ),
    ] = None,
    shape: Annotated[
        list[str] | None,
        typer.Option(
            "--shape",
            help="A request shape to measure against (ex=CARDS, sh=CARDS, sl=PERCENT, pt=PROFILE). Repeatable; default: the pending Workloads' shapes.",
        ),
    ] = None,
    free_cards: Annotated[
        int | None,
        typer.Option(
            "--free-cards",
            min=1,
            max=64,
            help="Hints free this many whole cards on one node (default: the largest pending whole-card request, or 1).",
            show_default=False,
        ),
    ] = None,
    by_node: Annotated[bool, typer.Option("--by-node", help="One row per node and view.")] = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Free capacity a request of each shape can use against capacity stranded on cards none of which fits it, a
    fragmentation score per view, and the fewest Workloads to move to free whole cards (each simulated)."""
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.fragmentation import parse_shape

    pools = refs.object_names(names or [], kinds.INSTANCETYPE, what="fragmentation")
    shapes = [parse_shape(s) for s in shape or []]  # a ShapeError is a usage error (exit 2)
    failures: list[tuple[str, str]] = []
    with bulk_allocation():
        if source.fleet:
            if by_node:
                raise UsageError("--by-node reads one cluster: give one --context")
            answers, failures = fleet_read(
                source,
                lambda src: (
                    refs.selected_items(
                        pool_items(src, pools, shapes, free_cards, False), src, kinds.INSTANCETYPE, source
                    ),
                    _active(src),
                ),
            )
            per = {ctx: rows for ctx, (rows, _) in answers.items()}
            items = (
                [{**i, "cluster": ctx} for ctx, rows in per.items() for i in rows]
                if source.by_cluster
                else fleet_items(per, {ctx: active for ctx, (_, active) in answers.items()})
            )
        else:
            opened = source.open()
            items = refs.selected_items(
                pool_items(opened, pools, shapes, free_cards, by_node), opened, kinds.INSTANCETYPE, source
            )
    listing = render.Listing(
        "NodeFragmentation" if by_node else "PoolFragmentation",
        items,
        NODE_COLUMNS if by_node else COLUMNS,
        ref=lambda i: refs.devices(i["node"]) if "node" in i else refs.instancetype(i["name"]),
        empty="No accelerated pools found.",
        rows=_rows,
        failures=failures,
    )
    render.emit(listing, output)


def _with_promises(source: "Source", devices: list[Any]) -> list[Any]:
    """The published ledgers with the cards promised to Workloads still starting (admitted, Pods not yet allocated)
    held, as the check holds them: free capacity a what-if must not count twice."""
    from gpuctl.cluster import read
    from gpuctl.core.allocator import with_charges
    from gpuctl.core.fit import promised

    charges = promised(read.admission_state(source).inputs)
    if not charges:
        return devices
    held = with_charges({d.node: d for d in devices}, charges)
    return [held[d.node] for d in devices]


def _known_profiles(shapes: list["Shape"], types: list[Any]) -> None:
    """A ``pt=PROFILE`` shape names a profile some pool offers or some card model's table has; anything else is a
    typing error, refused, not scored."""
    from gpuctl.core.fragmentation import PT
    from gpuctl.core.modes import PROFILE_TABLES

    known = {p.name for t in types for p in t.offered_profiles} | {
        p.published for cap in PROFILE_TABLES.values() for p in cap.profiles
    }
    for s in shapes:
        if s.view == PT and s.profile not in known:
            raise UsageError(
                f"--shape pt={s.profile}: no pool offers that profile and no card model's table has it "
                f"(known: {', '.join(sorted(known))})"
            )

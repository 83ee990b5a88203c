"""``gpuctl usage [INSTANCETYPE...]``: who holds what in each pool, each mode in its own unit and in card-equivalents."""

from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.errors import UsageError
from gpuctl.cli.names import complete_instancetypes
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cluster import kinds
from gpuctl.cluster.errors import NotFound, SourceError
from gpuctl.core.cardhours import GROUPS
from gpuctl.core.usage import UNATTRIBUTED, By

if TYPE_CHECKING:
    from gpuctl.cluster.prometheus import Kept, Prometheus
    from gpuctl.cluster.read import Source
    from gpuctl.core.cardhours import Window
    from gpuctl.core.usage import Row

OWNER_HEADER = {
    By.INSTANCETYPE: "",
    By.NAMESPACE: "NAMESPACE",
    By.LOCALQUEUE: "LOCALQUEUE",
    By.CLUSTERQUEUE: "CLUSTERQUEUE",
    By.WORKLOAD: "WORKLOAD",
}
FIGURES = ("EXCLUSIVE", "SHARED", "SLICED", "PARTITIONED", "CPU", "CARD-EQ", "RESERVED")


def columns(by: By) -> tuple[Column, ...]:
    namespaced = by in (By.LOCALQUEUE, By.WORKLOAD)
    owner: tuple[Column, ...] = (
        (Column("NAMESPACE"), Column(OWNER_HEADER[by])) if namespaced else (Column(OWNER_HEADER[by]),)
    )
    if by is By.INSTANCETYPE:
        owner = ()
    return (*owner, Column("INSTANCETYPE"), *(Column(f) for f in FIGURES), Column("PODS", wide_only=True))


def _number(value: float) -> str:
    """A figure as a person reads it: no trailing zeros, ``-`` for nothing."""
    if not value:
        return "-"
    return f"{value:.4f}".rstrip("0").rstrip(".")


def row_item(r: "Row", by: By) -> dict[str, Any]:
    """One row as structured output gives it: every figure, each mode in its unit and in card-equivalents."""
    from gpuctl.core.usage import equivalents, percent

    h = r.holding
    namespace = r.namespace
    if by is By.NAMESPACE and r.name != UNATTRIBUTED:
        namespace = r.name
    return {
        "by": by.value,
        "namespace": namespace,
        "name": r.name,
        "instancetype": r.pool,
        "exclusive": {"cards": h.cards},
        "shared": {"shares": h.shares},
        "sliced": {"slices": h.slices, "percent": percent(h.slice_units)},
        "partitioned": dict(sorted(h.partitions.items())),
        "cpu": equivalents(h.cpu),
        "cardEquivalents": {
            "total": equivalents(h.card_equivalents),
            **{mode: equivalents(eq) for mode, eq in sorted(h.equivalents.items())},
        },
        "reserved": {
            "cardEquivalents": equivalents(h.reserved),
            "cpu": equivalents(h.reserved_cpu),
            "workloads": h.reserved_workloads,
            "pods": h.reserved_pods,
        },
        "pods": h.pods,
    }


def _row(item: dict[str, Any]) -> list[str]:
    by = By(item["by"])
    owner = [item["namespace"] or UNATTRIBUTED, item["name"]] if by in (By.LOCALQUEUE, By.WORKLOAD) else [item["name"]]
    if by is By.INSTANCETYPE:
        owner = []
    sliced = item["sliced"]
    reserved = item["reserved"]
    reserved_text = _number(reserved["cardEquivalents"])
    if reserved["cpu"]:
        reserved_text = f"{_number(reserved['cpu'])} cpu" if reserved_text == "-" else reserved_text
    return [
        *owner,
        item["instancetype"],
        _number(item["exclusive"]["cards"]),
        _number(item["shared"]["shares"]),
        f"{sliced['slices']} ({_number(sliced['percent'])}%)" if sliced["slices"] else "-",
        ",".join(f"{name}x{n}" for name, n in item["partitioned"].items()) or "-",
        _number(item["cpu"]),
        _number(item["cardEquivalents"]["total"]),
        reserved_text,
        str(item["pods"]),
    ]


def usage_items(source: "Source", pools: list[str], by: By, namespace: str | None) -> list[dict[str, Any]]:
    """The rows of ``usage``: every pool's holdings (Pods' grants, what the ledger charges no Pod, reservations)
    summed per owner. Every Pod is read, whatever the namespace asked: the unattributed rest is the ledger less all
    of them."""
    from gpuctl.cluster import read
    from gpuctl.core.usage import holdings, summarise
    from gpuctl.core.workloads import parse_local_queue

    read.read_as_records(source, kinds.POD, kinds.WORKLOAD)
    types = read.instancetypes(source)
    missing = sorted(set(pools) - {t.name for t in types})
    if missing:
        raise NotFound(f'instancetype "{missing[0]}" not found (`gpuctl views` lists the pools)')
    chosen = [t for t in types if not pools or t.name in pools]
    held = holdings(
        chosen,
        read.devices(source) if any(t.acceleratable for t in chosen) else [],
        read.pods(source),
        read.workloads(source),
        [parse_local_queue(o) for o in source.list(kinds.LOCALQUEUE)],
    )
    return [row_item(r, by) for r in summarise(held, by, namespace)]


@command(
    "usage",
    summary="Show who holds what in each pool, in each mode's unit and in card-equivalents.",
    examples="""
  # Every namespace's holdings in every pool
  gpuctl usage -A

  # One pool, per LocalQueue of one namespace, as JSON for a chargeback script
  gpuctl usage gpustack--nvidia-h100-linux-amd64 -n team-a --by localqueue -o json""",
    listed=65,
    source=SourceFlags(namespaced=True),
    output=OutputFlags(),
)
def usage_command(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[INSTANCETYPE]...",
            help="Pools (default: every one).",
            autocompletion=complete_instancetypes,
        ),
    ] = None,
    by: Annotated[
        By,
        typer.Option(
            "--by", help="One row per namespace, localqueue, clusterqueue, instancetype or workload (and pool)."
        ),
    ] = By.NAMESPACE,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Card-hours held (and idle) over this much time before --until, from Prometheus (e.g. 30d).",
            show_default=False,
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="The window's end: an RFC 3339 time (default: now).", show_default=False),
    ] = None,
    step: Annotated[
        str, typer.Option("--step", help="With --since or --idle: the sampling step (at least the scrape interval).")
    ] = "5m",
    prometheus: Annotated[str | None, typer.Option("--prometheus", help="Prometheus' URL.", show_default=False)] = None,
    prometheus_service: Annotated[
        str | None,
        typer.Option(
            "--prometheus-service",
            help="NAMESPACE/NAME:PORT of Prometheus' Service, reached through the API server with the kubeconfig.",
            show_default=False,
        ),
    ] = None,
    idle_below: Annotated[
        float, typer.Option("--idle-below", help="With --since or --idle: idle under this utilization, in percent.")
    ] = 5.0,
    idle_for: Annotated[
        str, typer.Option("--idle-for", help="With --since or --idle: idle for at least this long.")
    ] = "30m",
    idle_now: Annotated[
        bool,
        typer.Option("--idle", help="The Pods whose cards are idle now (for at least --idle-for), from Prometheus."),
    ] = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """What each owner holds in each pool, from the Pods' allocation records priced against the ledgers: exclusive
    cards, shares, slices (and their percent of a card), partitions by profile and CPU cores, then all of it in
    card-equivalents by the credits fold. RESERVED is what admitted Workloads hold in quota with no card allocated
    yet (held but not running). What the ledger charges that no Pod's record names is the <none> owner (-A)."""
    from gpuctl.cluster.bulk import bulk_allocation

    pools = refs.object_names(names or [], kinds.INSTANCETYPE, what="usage")
    if idle_now:
        if since is not None:
            raise UsageError("--idle lists what is idle now; --since sums a window: give one")
        idle_command(pools, until, step, prometheus, prometheus_service, idle_below, idle_for, source, output)
        return
    if since is not None:
        card_hours_command(
            pools, by, since, until, step, prometheus, prometheus_service, idle_below, idle_for, source, output
        )
        return
    if until is not None or prometheus is not None or prometheus_service is not None:
        raise UsageError("--until, --prometheus and --prometheus-service go with --since")
    if output.format == "csv":
        raise UsageError("-o csv goes with --since (card-hours over a window)")
    opened = source.open()
    ns = source.scope(opened)
    with bulk_allocation():
        items = usage_items(opened, pools, by, ns)
    where = "in any namespace" if ns is None else f"in namespace {ns}"
    render.emit(
        render.Listing("Usage", items, columns(by), _row, empty=f"Nothing held or reserved {where}."),
        output,
    )


HOURS_MODES_NOTE = (
    "idle: a card's (or MIG instance's) activity below {below:g} % for at least {idle_for}; a slice or share is idle "
    "only when its whole card is, and its idle hours are its card-equivalents' part"
)


def _prometheus(prometheus: str | None, service: str | None, source: SourceSpec, flag: str) -> "Prometheus":
    from gpuctl.cluster.prometheus import Prometheus, ServiceRef

    if (prometheus is None) == (service is None):
        raise UsageError(f"{flag} reads Prometheus: give --prometheus URL or --prometheus-service NAMESPACE/NAME:PORT")
    if service is not None:
        return Prometheus(service=ServiceRef.parse(service), live=source.live())
    return Prometheus(prometheus)


def _namespace(source: SourceSpec) -> str | None:
    try:
        return source.scope()
    except SourceError:  # no kubeconfig to name a namespace: Prometheus alone is read
        return "default"


def _window_end(until: str | None) -> float:
    from gpuctl.cli import clock
    from gpuctl.core.queueing import epoch_seconds

    end = clock.now() if until in (None, "now") else epoch_seconds(str(until))
    if end is None:
        raise UsageError(f"--until {until!r}: give an RFC 3339 time (2026-12-01T00:00:00Z) or now")
    return end


IDLE_COLUMNS = (
    Column("NAMESPACE"),
    Column("POD"),
    Column("WORKLOAD"),
    Column("LOCALQUEUE"),
    Column("MODE"),
    Column("CARD-EQ"),
    Column("IDLE-FOR"),
    Column("WORKLOAD-AGE"),
    Column("NODE", wide_only=True),
    Column("CARD", wide_only=True),
    Column("INSTANCETYPE", wide_only=True),
)


def idle_command(
    pools: list[str],
    until: str | None,
    step: str,
    prometheus: str | None,
    service: str | None,
    idle_below: float,
    idle_for: str,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """``usage --idle``: the holders whose cards are idle now, most card-equivalents first."""
    from gpuctl.cli.source import parse_duration
    from gpuctl.core.ages import age_text
    from gpuctl.core.ages import since as age_since
    from gpuctl.core.cardhours import idle_holders, idle_now_queries, idle_window

    client = _prometheus(prometheus, service, source, "--idle")
    step_s = int(parse_duration(step, "--step"))
    end = _window_end(until)
    window = idle_window(end, step_s, int(parse_duration(idle_for, "--idle-for")), idle_below / 100)
    ns = _namespace(source)
    answers = {
        name: client.query(expr, window.until, what=f"{name} query")
        for name, expr in idle_now_queries(window, ns, pools).items()
    }
    held = idle_holders(window, answers)
    created = _workload_creation(source, {(h.labels.get("namespace", ""), h.labels.get("workload", "")) for h in held})
    items = []
    for h in held:
        key = (h.labels.get("namespace", ""), h.labels.get("workload", ""))
        items.append(
            {
                **{k: h.labels.get(k, "") for k in ("namespace", "pod", "workload", "localqueue", "clusterqueue")},
                **{k: h.labels.get(k, "") for k in ("instancetype", "node", "mode", "UUID", "GPU_I_PROFILE")},
                "cardEquivalents": h.card_equivalents,
                "idleSeconds": h.idle_seconds,
                "workloadCreated": created.get(key) or None,
            }
        )
    now = window.until

    def row(i: dict[str, Any]) -> list[str]:
        idle_text = age_text(i["idleSeconds"]) if i["idleSeconds"] is not None else f">{age_text(window.seconds)}"
        card = i["UUID"] + (f"/{i['GPU_I_PROFILE']}" if i["GPU_I_PROFILE"] else "")
        return [
            i["namespace"] or UNATTRIBUTED,
            i["pod"] or "-",
            i["workload"] or "-",
            i["localqueue"] or "-",
            i["mode"],
            _number(i["cardEquivalents"]),
            idle_text,
            age_since(i["workloadCreated"], now) if i["workloadCreated"] else "-",
            i["node"] or "-",
            card,
            i["instancetype"] or "-",
        ]

    def csv_rows(i: dict[str, Any]) -> list[list[Any]]:
        return [
            [i[k] for k in ("namespace", "pod", "workload", "localqueue", "mode", "cardEquivalents", "idleSeconds")]
        ]

    render.emit(
        render.Listing(
            "IdleHolder",
            items,
            IDLE_COLUMNS,
            row,
            ref=lambda i: refs.ObjectRef(kinds.POD, i["pod"], i["namespace"]),
            empty=f"No card held idle for {idle_for} or more (below {idle_below:g} %).",
            extra={
                "idleRule": {"belowPercent": idle_below, "forSeconds": window.idle_for},
                "lookBackSeconds": window.seconds,
            },
            csv=(("namespace", "pod", "workload", "localqueue", "mode", "card_equivalents", "idle_seconds"), csv_rows),
        ),
        output,
    )


def _kept(source: SourceSpec, window: "Window") -> "Kept":
    """The series a dump kept, checked to answer ``window``: same step, the window inside what was kept."""
    from gpuctl.cluster.prometheus import kept_series

    kept = kept_series(source.open().list(kinds.PROMETHEUS_SERIES))
    if kept is None:
        raise UsageError(
            f"{source.snapshot} keeps no Prometheus series: dump with --prometheus URL, or give --prometheus"
        )
    if window.step != kept.step:
        raise UsageError(
            f"--step {window.step}s: the snapshot kept its series every {kept.step}s; use --step {kept.step}s"
        )
    if window.until - window.seconds - window.idle_for < kept.start or window.until > kept.end:
        raise UsageError(
            f"the window and --idle-for reach beyond what the snapshot kept ({_stamp(kept.start + kept.idle_for)} to "
            f"{_stamp(kept.end)}, --idle-for at most {kept.idle_for}s)"
        )
    return kept


def _workload_creation(source: SourceSpec, keys: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """When each named Workload was created, where the cluster can be read (nothing otherwise: Prometheus alone
    answers the rest)."""
    from gpuctl.core.workloads import parse_workload

    wanted = {k for k in keys if k[1]}
    if not wanted:
        return {}
    try:
        opened = source.open()
        objs = [opened.get(kinds.WORKLOAD, name, ns) for ns, name in sorted(wanted)[:200]]
    except SourceError:
        return {}
    return {(w.namespace, w.name): w.created for w in (parse_workload(o) for o in objs if o)}


def card_hours_command(
    pools: list[str],
    by: By,
    since: str,
    until: str | None,
    step: str,
    prometheus: str | None,
    service: str | None,
    idle_below: float,
    idle_for: str,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """``usage --since``: card-hours per group and mode over a window, from Prometheus."""
    from gpuctl.cli.source import parse_duration
    from gpuctl.core.cardhours import Window, align, card_hours, evaluate, queries

    offline = prometheus is None and service is None and source.snapshot is not None
    client = None if offline else _prometheus(prometheus, service, source, "--since")
    step_s = int(parse_duration(step, "--step"))
    if offline and until is None:
        from gpuctl.cli import clock

        end: float = clock.of(source.open())  # the dump's own time
    else:
        end = _window_end(until)
    window = Window(
        align(end, step_s) if step_s > 0 else 0,
        int(parse_duration(since, "--since")),
        step_s,
        int(parse_duration(idle_for, "--idle-for")),
        idle_below / 100,
    )
    ns = _namespace(source)
    if client is None:
        answers = evaluate(window, by, _kept(source, window).series, ns, pools)
        described = f"the series kept in {source.snapshot}"
    else:
        answers = {
            name: client.query(expr, window.until, what=f"{name} query")
            for name, expr in queries(window, by, ns, pools).items()
        }
        described = client.describe()
    result = card_hours(window, by, answers)
    group = GROUPS_HEADERS[by]
    items = [
        {
            "by": by.value,
            **dict(zip(GROUPS[by], r.group, strict=True)),
            "mode": r.mode,
            "cardHours": r.card_hours,
            "idleCardHours": r.idle_card_hours,
            "noUtilizationCardHours": r.no_data_card_hours,
        }
        for r in result.rows
    ]

    def row(item: dict[str, Any]) -> list[str]:
        return [
            *(item[k] or UNATTRIBUTED for k in GROUPS[by]),
            item["mode"],
            _hours(item["cardHours"]),
            _hours(item["idleCardHours"]) if item["mode"] != "reserved" else "-",
            _hours(item["noUtilizationCardHours"]) if item["mode"] != "reserved" else "-",
        ]

    def csv_rows(item: dict[str, Any]) -> list[list[Any]]:
        return [
            [
                *(item[k] for k in GROUPS[by]),
                item["mode"],
                item["cardHours"],
                item["idleCardHours"],
                item["noUtilizationCardHours"],
            ]
        ]

    no_data = sum(r.no_data_card_hours for r in result.rows)
    start = window.until - window.seconds

    def footer() -> str:
        lines = [
            f"window {_stamp(start)} to {_stamp(window.until)} ({result.window_hours:g} h), step {window.step}s; "
            f"the operator's series cover {result.covered_hours:g} h of it",
            HOURS_MODES_NOTE.format(below=idle_below, idle_for=idle_for),
        ]
        if no_data:
            lines.append(f"no utilization data for {_hours(no_data)} card-hours (counted neither idle nor busy)")
        return "\n".join(lines) + "\n"

    render.emit(
        render.Listing(
            "CardHours",
            items,
            (*(Column(h) for h in group), Column("MODE"), Column("CARD-HOURS"), Column("IDLE"), Column("NO-DATA")),
            row,
            empty="No card-hours in the window.",
            extra={
                "window": {"start": _stamp(start), "end": _stamp(window.until), "stepSeconds": window.step},
                "coveredHours": result.covered_hours,
                "idleRule": {"belowPercent": idle_below, "forSeconds": window.idle_for},
                "prometheus": described,
            },
            csv=(
                (*GROUPS[by], "mode", "card_hours", "idle_card_hours", "no_utilization_card_hours"),
                csv_rows,
            ),
            footer=footer,
        ),
        output,
    )


GROUPS_HEADERS = {by: tuple(k.upper() for k in keys) for by, keys in GROUPS.items()}


def _hours(value: float) -> str:
    return f"{value:.2f}" if value else "-"


def _stamp(epoch: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))

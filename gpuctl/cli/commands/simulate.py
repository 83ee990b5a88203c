"""``gpuctl simulate -f FILE``: would these workloads be admitted now, where, and if not, what would make room?"""

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuctl.cli import refs, render
from gpuctl.cli.errors import AnswerNo, UsageError
from gpuctl.cli.names import complete_instancetypes, complete_workloads
from gpuctl.cli.options import KueueVersionOption
from gpuctl.cli.options import kueue_version as read_kueue_version
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.usecases import explanation_text, split_name
from gpuctl.cluster import kinds
from gpuctl.cluster.errors import NotFound

if TYPE_CHECKING:
    from gpuctl.cluster.read import Source
    from gpuctl.core.simulate import ClusterState, Outcome, Simulator
    from gpuctl.core.submissions import Submission
    from gpuctl.core.suggest import Suggestions

MAX_SUBMISSIONS = 1000
MAX_GROWTH = 4096
"""The most nodes ``--add-nodes auto`` tries."""


def read_manifests(paths: list[str], default_namespace: str) -> list["Submission"]:
    """Every object of every file (multi-document YAML, JSON, ``List`` objects; ``-`` is stdin), as submissions."""
    from gpuctl.cluster.errors import SourceError
    from gpuctl.cluster.snapshot import _check_regular, _yaml_documents, flatten, max_bytes, read_objects
    from gpuctl.core.submissions import submissions_from_manifest

    out: list[Submission] = []
    for path in paths:
        if path == "-":
            text = sys.stdin.read(max_bytes() + 1)
            if len(text) > max_bytes():
                raise SourceError(f"stdin: over the {max_bytes()}-byte limit; raise GPUCTL_SNAPSHOT_MAX_BYTES")
            where = Path("<stdin>")
            objects = [o for doc in _yaml_documents(where, text) for o in flatten(doc, where)]
        else:
            p = Path(path)
            if p.is_dir():
                raise UsageError(f"{path}: a directory; give manifest files with -f")
            _check_regular(p, max_bytes())
            objects = list(read_objects(p))
        if not objects:
            raise UsageError(f"{path}: holds no object")
        for i, obj in enumerate(objects):
            label = path if len(objects) == 1 else f"{path} (object {i + 1})"
            out.extend(submissions_from_manifest(obj, label, default_namespace))  # a ManifestError: exit 2
        if len(out) > MAX_SUBMISSIONS:
            raise UsageError(f"more than {MAX_SUBMISSIONS} workloads to simulate; split the manifests")
    return out


def _prioritised(source: "Source", submissions: list["Submission"]) -> list["Submission"]:
    """Each submission with the priority Kueue would give its Workload, from the cluster's priority classes."""
    from gpuctl.cluster import read
    from gpuctl.cluster.errors import SourceError
    from gpuctl.core.submissions import with_priority

    if not submissions:
        return submissions
    try:
        classes = read.priority_classes(source)
    except SourceError as exc:
        named = next((s for s in submissions if s.priority_class or s.pod_priority_class), None)
        if named is not None:
            raise UsageError(f"{named.kind} {named.key} names a priority class, which cannot be read: {exc}") from None
        return submissions
    return [with_priority(s, classes, f"{s.kind} {s.key}") for s in submissions]


def _existing(state: "ClusterState", refs: list[str], namespace: str) -> list["Submission"]:
    """Workloads already in the cluster, simulated as if submitted anew (they are taken out of the state first)."""
    from gpuctl.core.submissions import resubmission

    by_key = {w.key: w for w in state.workloads}
    out = []
    for ref in refs:
        ns, name = split_name(ref, namespace)
        w = by_key.get(f"{ns}/{name}")
        if w is None:
            raise NotFound(f'workload "{ns}/{name}" not found (`gpuctl workloads -A` lists them)')
        out.append(resubmission(w))
    return out


def parse_set_mode(text: str) -> tuple[str, str | None, str]:
    """``NODE[/CARD]=partitioned|whole`` → (node, card or None, mode)."""
    from gpuctl.core.modes import MODES

    target, sep, mode = text.partition("=")
    node, _, card = target.partition("/")
    if not sep or not node or mode not in MODES or (target.endswith("/") and not card):
        raise UsageError(f"--set-mode {text!r}: give NODE=partitioned|whole or NODE/CARD=partitioned|whole")
    return node, card or None, mode


def _scenario(
    simulator: "Simulator",
    without: list[str],
    drain: list[str],
    hold: list[str],
    namespace: str,
    set_mode: Sequence[tuple[str, str | None, str]] = (),
) -> None:
    if without:
        simulator.finish(["/".join(split_name(r, namespace)) for r in without])
    for node, card, mode in set_mode:
        simulator.set_mode(node, [card] if card else None, mode)
    for pool in refs.object_names(drain, kinds.INSTANCETYPE, what="simulate --drain"):
        simulator.stop(pool, "HoldAndDrain")
    for pool in refs.object_names(hold, kinds.INSTANCETYPE, what="simulate --hold"):
        simulator.stop(pool, "Hold")


def _run(
    simulator: "Simulator", submissions: list["Submission"], suggest: bool
) -> list[tuple["Outcome", "Suggestions | None"]]:
    from gpuctl.core.suggest import unblockers

    results: list[tuple[Outcome, Suggestions | None]] = []
    for sub in submissions:
        before = simulator.copy() if suggest else None
        outcome = simulator.simulate(sub)
        found = unblockers(before, sub, outcome) if before is not None and not outcome.admitted else None
        results.append((outcome, found))
    return results


def _item(outcome: "Outcome", found: "Suggestions | None") -> dict[str, Any]:
    item = outcome.to_dict()
    if found is not None:
        item["unblockers"] = [u.to_dict() for u in found.found]
        item["tried"] = [t.to_dict() for t in found.tried]
    return item


def _text(results: list[tuple["Outcome", "Suggestions | None"]], wide: bool, note: str, kueue: str) -> str:
    parts = [note] if note else []
    for outcome, found in results:
        e = outcome.explanation
        held = e.held_by
        if held is None:
            where = "; ".join(f"{n.name} ({', '.join(n.cards) or 'no card'})" for n in outcome.placement)
            title = f"{e.kind} {e.namespace}/{e.name}: would be admitted" + (f" on {where}" if where else "")
            if outcome.preempted:
                title += f", once Kueue preempts {', '.join(outcome.preempted)}"
        else:
            title = f"{e.kind} {e.namespace}/{e.name}: would be held at gate {held} ({e.gates[held - 1].name})"
        text = explanation_text(e, wide=wide, title=title)
        for u in found.found if found else ():
            text += f"  would admit: {u.change}\n"
        for t in found.tried if found else ():
            text += f"  tried ({t.kind}): {t.why}\n"
        parts.append(text)
    return "\n".join(parts) + kueue + "\n"


@command(
    "simulate",
    summary="Show whether workloads would be admitted now, and where.",
    examples="""
  # Would this Pod be admitted now, on which node and cards?
  gpuctl simulate -f examples/pod.yaml

  # Three manifests in sequence, each seeing the ones before it placed; exit 3 if any is held
  gpuctl simulate -f a.yaml -f b.yaml -f c.yaml --exit-code

  # What would make room for a held one (each change proven by simulation)
  gpuctl simulate -f train.yaml --suggest -o wide

  # What-if: a Workload finished, a pool drained, another queue at its quota
  gpuctl simulate -f train.yaml --without team-a/batch --drain gpustack--nvidia-a10g-linux-amd64 --at-quota team-b-cq

  # Capacity planning: how many more nodes like a10g-1 until the queue's head fits
  gpuctl simulate --workload team-a/train --add-nodes auto --like a10g-1""",
    listed=40,
    source=SourceFlags(namespace=True),
    output=OutputFlags(sort=False),
)
def simulate_command(
    filenames: Annotated[
        list[str] | None,
        typer.Option(
            "--filename",
            "-f",
            help="A manifest (Pod, Job, Deployment, StatefulSet, Workload, Instance); - reads stdin. Repeatable.",
        ),
    ] = None,
    workload: Annotated[
        list[str] | None,
        typer.Option(
            "--workload",
            help="An existing Workload ([NAMESPACE/]NAME), simulated as if submitted anew. Repeatable.",
            autocompletion=complete_workloads,
        ),
    ] = None,
    suggest: Annotated[
        bool,
        typer.Option(
            "--suggest", help="For a held workload, the smallest changes that admit it, each proven by simulation."
        ),
    ] = False,
    without: Annotated[
        list[str] | None,
        typer.Option(
            "--without",
            help="As if this Workload ([NAMESPACE/]NAME) had finished. Repeatable.",
            autocompletion=complete_workloads,
        ),
    ] = None,
    drain: Annotated[
        list[str] | None,
        typer.Option(
            "--drain",
            help="As if this pool were drained (HoldAndDrain). Repeatable.",
            autocompletion=complete_instancetypes,
        ),
    ] = None,
    hold: Annotated[
        list[str] | None,
        typer.Option("--hold", help="As if this pool were on Hold. Repeatable.", autocompletion=complete_instancetypes),
    ] = None,
    add_nodes: Annotated[
        str | None,
        typer.Option(
            "--add-nodes",
            help="N more nodes shaped like --like (every card free), or 'auto': the fewest that admit every workload.",
            show_default=False,
        ),
    ] = None,
    like: Annotated[str | None, typer.Option("--like", help="The node --add-nodes copies.", show_default=False)] = None,
    set_mode: Annotated[
        list[str] | None,
        typer.Option(
            "--set-mode",
            help="As if these cards (NODE[/CARD], a card by id or index) were switched to partitioned or whole, free,"
            " by their vendor's rule: NODE=MODE switches every card of the node. Repeatable.",
            show_default=False,
        ),
    ] = None,
    at_quota: Annotated[
        list[str] | None,
        typer.Option(
            "--at-quota",
            help="As if this ClusterQueue used all its nominal quota (lends nothing to its cohort). Repeatable.",
            autocompletion=complete_instancetypes,
        ),
    ] = None,
    exit_code: Annotated[bool, typer.Option("--exit-code", help="Exit 3 when a workload would be held.")] = False,
    kueue_version: KueueVersionOption = None,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Would these workloads be admitted now? Each runs through the five gates in order, seeing the ones before it
    placed: the Pod webhook, Kueue's quota and TAS placement, the check, the nodes' keys and the allocator's cards.
    Nothing is written to the cluster."""
    from gpuctl.cluster import read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core.simulate import ScenarioError, Simulator
    from gpuctl.core.suggest import fewest_nodes

    if not filenames and not workload:
        raise UsageError("give the workloads to simulate: -f FILE (or -f - for stdin) or --workload NAME")
    if (add_nodes is None) != (like is None):
        raise UsageError("--add-nodes and --like go together: --add-nodes N --like NODE")
    if like is not None:  # NODE, node/NODE or its devices.worker.gpustack.ai/NODE
        like = refs.split_name(like, (kinds.NODE, kinds.DEVICES), what="simulate --like")[1]
    growth: int | None = None
    if add_nodes is not None and add_nodes != "auto":
        try:
            growth = int(add_nodes)
        except ValueError:
            raise UsageError(f"--add-nodes {add_nodes!r}: give a number of nodes or 'auto'") from None
        if not 0 <= growth <= 100_000:
            raise UsageError(f"--add-nodes {growth}: give 0 to 100000 nodes, or 'auto'")
    remodes = [parse_set_mode(t) for t in set_mode or []]
    kueue = read_kueue_version(kueue_version)
    opened = source.open()
    namespace = source.resolved_namespace(opened)
    submissions = _prioritised(opened, read_manifests(filenames or [], namespace))
    with bulk_allocation():
        state = read.simulation_state(opened, kueue=kueue)
        submissions = _existing(state, workload or [], namespace) + submissions
        try:
            if like is not None and like not in state.devices:
                raise ScenarioError(
                    f"--like {like}: no node of that name has a Devices ledger (`gpuctl views --by-node` lists them)"
                )
            simulator = Simulator(state, at_quota=at_quota or ())
            # A Workload simulated anew (by --workload or a manifest of the same name) leaves the state first.
            existing = {w.key for w in state.workloads}
            simulator.remove(s.key for s in submissions if s.kind == "Workload" and s.key in existing)
            _scenario(simulator, list(without or []), drain or [], hold or [], namespace, remodes)
            note = ""
            grown_to: dict[str, Any] | None = None
            if add_nodes == "auto":
                assert like is not None
                grown = fewest_nodes(simulator, submissions, like, MAX_GROWTH)
                if grown is None:
                    note = f"even {MAX_GROWTH} more nodes like {like} do not admit every workload"
                    grown_to = {"like": like, "count": None}
                    results = _run(simulator, submissions, suggest)
                else:
                    n, outcomes = grown
                    results = [(o, None) for o in outcomes]
                    note = f"{n} more node(s) like {like} admit every workload"
                    grown_to = {"like": like, "count": n}
            else:
                if growth:
                    assert like is not None
                    simulator.add_nodes(growth, like)
                results = _run(simulator, submissions, suggest)
        except ScenarioError as exc:
            raise UsageError(str(exc)) from None
    items = [_item(o, f) for o, f in results]
    payload: dict[str, Any]
    if len(items) == 1 and grown_to is None:
        payload = items[0]
    else:
        payload = {"apiVersion": "v1", "kind": "List", "items": items}
        if grown_to is not None:
            payload["addNodes"] = grown_to
    payload["kueue"] = state.kueue.to_dict()
    render.emit_object(payload, output, lambda: _text(results, output.wide, note, state.kueue.describe()))
    if exit_code and any(not o.admitted for o, _ in results):
        raise AnswerNo("")

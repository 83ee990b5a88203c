"""Whether the operator serves its webhooks and its AdmissionCheck now, and what the API server and Kueue do when it
does not: a webhook failing closed (``failurePolicy: Fail``) makes the API server refuse what it would review, one
failing open (``Ignore``) lets it through unreviewed, and Workloads wait at the check while no verdict is written.

Whether it serves is read without calling a webhook: live, its webhook endpoint's ``/readyz`` (through the API
server's proxy for a Service, which answers "no endpoints available" while no replica is ready; directly for a URL),
since every replica serves the webhooks, leader or not; where that is not probed (a dump) or may not be (the proxy
forbidden), the leader Lease: one not renewed within its duration means no replica leads (the process is stopped,
hung or gone). Without either (a snapshot without the Lease, an operator run without leader election) nothing is
claimed, and the answers are those of a serving operator.

Which webhook reviews an object is read from the configurations as the API server reads them: a rule covering the
operation, group, version, resource and scope, the object selector, and the namespace selector against the
Namespace's labels (unknown where they could not be read: the answer says so)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from gpuctl.core import gpustack, naming
from gpuctl.core.doctor.records import (
    DeploymentRecord,
    LeaseRecord,
    Rule,
    WebhookEntry,
    compact_json,
    duration_text,
    operator_fix,
    url_base,
)
from gpuctl.core.pods import Pod
from gpuctl.core.queueing import epoch_seconds


@dataclass(frozen=True, slots=True)
class OperatorServing:
    """What is read of the operator: its webhook configurations' entries, its leader Lease, and when."""

    entries: tuple[WebhookEntry, ...]
    lease: LeaseRecord | None
    now: float
    deployed: bool = True
    """Whether a Deployment runs it in the cluster (else its webhooks are called by URL, a process outside)."""
    endpoint: str | None = None
    """What probing its webhook endpoint found: "" it answered, else why not; None not probed (a snapshot)."""
    registered: bool = False
    """Whether ``entries`` are every webhook configuration the cluster holds (read from it live), so a webhook of
    gpuctl's missing from them is not registered; False where they may be partial (a snapshot holds what it was
    given), and nothing is said of a missing one."""
    namespaces: Mapping[str, Mapping[str, str]] | None = None
    """Each Namespace's labels, read where a webhook of gpuctl's selects by namespace; None: not read (only a
    Namespace's name label is known)."""
    worker: bool = False
    """Whether GPUStack's worker serves the webhooks and the check here (its Lease or its webhook configurations are
    there): then ``entries`` are judged by its configurations and ``lease`` is its Lease."""

    @property
    def server(self) -> str:
        """Who serves the webhooks and the check, as the answers name it."""
        return "GPUStack's worker" if self.worker else "the operator"

    def gates(self, e: WebhookEntry) -> bool:
        """Whether an entry is one of the webhooks the gates read: GPUStack's worker's where it runs, else one
        this version of gpuctl registers."""
        if self.worker:
            return e.configuration in gpustack.CONFIGURATIONS
        return e.ours or e.configuration in (naming.MUTATING_CONFIGURATION, naming.VALIDATING_CONFIGURATION)

    def down(self) -> str | None:
        """Why no replica serves, or None while one does (or nothing says otherwise). Probed, the endpoint decides:
        every replica serves the webhooks, leader or not, and an operator run without leader election keeps no
        Lease. Not probed (a dump), a lapsed Lease does."""
        if self.endpoint is not None:
            if not self.endpoint:
                return None
            lapsed = f"; {self.why_down()}" if self.down_for() is not None else ""
            return f"its webhook endpoint does not answer ({self.endpoint}){lapsed}"
        return self.why_down() if self.down_for() is not None else None

    def down_for(self) -> float | None:
        """Seconds since the Lease lapsed (renewal plus duration), or None while it is current or unknown."""
        if self.lease is None:
            return None
        renewed = epoch_seconds(self.lease.renew_time) if self.lease.renew_time else None
        if renewed is None:
            return None
        lapsed = self.now - renewed - self.lease.duration_seconds
        return lapsed if lapsed > 0 else None

    def why_down(self) -> str:
        assert self.lease is not None
        renewed = epoch_seconds(self.lease.renew_time) or self.now
        whose = "GPUStack's worker's" if self.worker else "the operator's"
        return (
            f"{whose} Lease {self.lease.namespace}/{self.lease.name} was last renewed "
            f"{duration_text(self.now - renewed)} ago and lapses after {self.lease.duration_seconds} s: no replica "
            "serves"
        )

    def leaderless(self) -> str | None:
        """Where the webhook endpoint answers but the Lease lapsed: what that means for the controllers (which run
        only on the Lease's holder when the operator runs with leader election); None otherwise."""
        lapsed = self.down_for()
        if self.endpoint != "" or lapsed is None or self.lease is None:
            return None
        return (
            f"the operator's webhook endpoint answers, but its Lease {self.lease.namespace}/{self.lease.name} lapsed "
            f"{duration_text(lapsed)} ago: where it runs with leader election, no replica runs its controllers (the "
            f"{naming.NODE_DEVICES_CHECK} check among them) until one takes the Lease"
        )


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server sets on every Namespace to its name: known of a Namespace whose labels were not read."""


def selector_decides(
    selector: Mapping[str, object], labels: Mapping[str, str], known: Iterable[str] | None = None
) -> bool | None:
    """Whether a label selector (``matchLabels`` and ``matchExpressions``; an empty one matches all) matches
    ``labels``, or None where that turns on a label not known: ``known`` names the keys ``labels`` tells the presence
    and value of (None: every key). A requirement that fails decides it, whatever is not known."""
    requirements: list[tuple[str, str, list[str]]] = []
    match_labels = selector.get("matchLabels")
    if isinstance(match_labels, Mapping):
        requirements.extend((str(k), "In", [str(v)]) for k, v in match_labels.items())
    expressions = selector.get("matchExpressions")
    for e in expressions if isinstance(expressions, list) else []:
        if not isinstance(e, Mapping):
            continue
        values = [str(v) for v in e.get("values") or []] if isinstance(e.get("values"), list) else []
        requirements.append((str(e.get("key") or ""), str(e.get("operator") or ""), values))
    told = None if known is None else set(known)
    unknown = False
    for key, op, values in requirements:
        if told is not None and key not in told:
            unknown = True
            continue
        present = key in labels
        if (
            (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
            or (op == "In" and (not present or labels[key] not in values))
            or (op == "NotIn" and present and labels[key] in values)
        ):
            return False
    return None if unknown else True


def selector_matches(selector: Mapping[str, object], labels: Mapping[str, str]) -> bool:
    """A label selector (``matchLabels`` and ``matchExpressions``) against labels; an empty one matches all."""
    return bool(selector_decides(selector, labels))


def _covers(rule: Rule, resource: str, operation: str) -> bool:
    """Whether a rule covers ``operation`` on the objects of ``resource`` (plural), in the group, version and scope
    gpuctl's webhooks review them in."""
    from gpuctl.core.webhooks import RESOURCES

    kind = next((r for r in RESOURCES.values() if r.plural == resource), None)
    group, version, namespaced = (kind.group, kind.versions[0], kind.namespaced) if kind else ("", "v1", True)
    return (
        (group in rule.api_groups or "*" in rule.api_groups)
        and (version in rule.api_versions or "*" in rule.api_versions)
        and (resource in rule.resources or "*" in rule.resources or "*/*" in rule.resources)
        and (operation in rule.operations or "*" in rule.operations)
        and rule.scope in ("*", "Namespaced" if namespaced else "Cluster")
    )


def called(
    e: WebhookEntry,
    resource: str,
    operation: str,
    labels: Mapping[str, str],
    namespace: str = "",
    namespace_labels: Mapping[str, str] | None = None,
) -> tuple[bool | None, str]:
    """Whether the API server calls webhook entry ``e`` for ``operation`` on an object of ``resource`` (plural) with
    ``labels`` in ``namespace`` (whose labels are ``namespace_labels``; None: not read, only its name label is known):
    (True, "") it does; (False, why) it does not; (None, what decides it) that is not known here."""
    if not any(_covers(r, resource, operation) for r in e.rules):
        return False, f"its rules do not cover {operation} of {resource}"
    if not selector_matches(e.object_selector, labels):
        return False, f"its objectSelector {compact_json(dict(e.object_selector))} does not select the object's labels"
    undecided: list[str] = []
    if e.namespace_selector and namespace:
        if namespace_labels is None:
            by_name = {NAMESPACE_NAME_LABEL: namespace}
            matches = selector_decides(e.namespace_selector, by_name, known=by_name)
        else:
            matches = selector_decides(e.namespace_selector, {NAMESPACE_NAME_LABEL: namespace, **namespace_labels})
        if matches is False:
            return False, (
                f"its namespaceSelector {compact_json(dict(e.namespace_selector))} does not select Namespace "
                f"{namespace}"
            )
        if matches is None:
            undecided.append(
                f"its namespaceSelector {compact_json(dict(e.namespace_selector))} selects Namespace {namespace} "
                "(whose labels could not be read)"
            )
    if e.match_conditions:
        undecided.append(f"its matchConditions ({', '.join(n for n, _ in e.match_conditions)}) hold for the object")
    return (None, " and ".join(undecided)) if undecided else (True, "")


@dataclass(frozen=True, slots=True)
class Unserved:
    """What the API server does with an object a webhook the operator does not serve (or that is not called) would
    review."""

    refused: bool
    """True where a webhook fails closed: the API server refuses the object."""
    summary: str
    evidence: tuple[str, ...]
    hint: str
    known: bool = True
    """False where the answer turns on what cannot be read here (whether the API server calls the webhook: a
    namespaceSelector on a Namespace whose labels were not read, matchConditions)."""


def unserved_review(
    serving: OperatorServing | None,
    resource: str,
    labels: Mapping[str, str],
    what: str,
    *,
    namespace: str = "",
    operation: str = "CREATE",
) -> Unserved | None:
    """What the API server does with ``what`` (e.g. "the Pod"), an object of ``resource`` (plural) with ``labels``
    in ``namespace``, for ``operation``, where gpuctl's webhooks do not review it; None where they do (or nothing
    is known: a snapshot without the operator's Lease keeps today's answers).

    - The operator does not serve (its endpoint does not answer; not probed, its Lease lapsed): a webhook the API
      server calls that fails closed (``failurePolicy: Fail``) makes it refuse the object; one that fails open
      (``Ignore``) lets it through unreviewed.
    - The configurations were read whole (live) and a webhook this version reviews such an object with is not called
      for it (no configuration registers it, or its rules or selectors miss the object): let through unreviewed."""
    if serving is None:
        return None
    namespace_labels = serving.namespaces.get(namespace) if serving.namespaces is not None and namespace else None
    sure: list[WebhookEntry] = []
    maybe: list[tuple[WebhookEntry, str]] = []
    missed: dict[str, str] = {}
    for e in serving.entries:
        if not serving.gates(e):
            continue
        got, why = called(e, resource, operation, labels, namespace, namespace_labels)
        if got:
            sure.append(e)
        elif got is None:
            maybe.append((e, why))
        else:
            missed.setdefault(e.name, why)
    hint = operator_fix_hint(serving)
    why_down = serving.down()
    if why_down is not None and (sure or maybe):
        said = [
            f"webhook {e.name} ({e.configuration}) reviews it, failurePolicy {e.failure_policy or 'Fail'}" for e in sure
        ] + [
            f"webhook {e.name} ({e.configuration}) reviews it if {why}, failurePolicy {e.failure_policy or 'Fail'}"
            for e, why in maybe
        ]
        evidence = (*said, why_down)
        closed = [e for e in sure if e.failure_policy != "Ignore"]
        if closed:
            return Unserved(
                True,
                f"the API server will refuse {what}: webhook {', '.join(e.name for e in closed)} fails closed "
                f"(failurePolicy Fail) and {serving.server} does not serve it",
                evidence,
                hint,
            )
        perhaps = [(e, why) for e, why in maybe if e.failure_policy != "Ignore"]
        if perhaps:
            return Unserved(
                True,
                f"the API server will refuse {what} if webhook {perhaps[0][0].name} is called for it ({perhaps[0][1]}): "
                f"it fails closed (failurePolicy Fail) and {serving.server} does not serve it",
                evidence,
                hint,
                known=False,
            )
        # Every webhook that may review it fails open: called or not, it is let through unreviewed.
        names = [e.name for e in [*sure, *(e for e, _ in maybe)]]
        return Unserved(
            False,
            f"the API server will let {what} through unreviewed: webhook {', '.join(names)} fails open (failurePolicy "
            f"Ignore) and {serving.server} does not serve it ({_unmade(names)})",
            evidence,
            hint,
        )
    if serving.registered:
        from gpuctl.core.webhooks import REGISTRY

        reviewed = {e.name for e in sure} | {e.name for e, _ in maybe}
        obj = {"metadata": {"labels": dict(labels)}}
        # Beside GPUStack's worker, each webhook of gpuctl's is done by the worker's own entries.
        doing = {
            w.name: gpustack.WEBHOOK_COUNTERPARTS.get(w.name, ()) if serving.worker else (w.name,) for w in REGISTRY
        }
        absent = {
            w.name: next(n for n in doing[w.name] if n not in reviewed)
            for w in REGISTRY
            if w.resource.plural == resource
            and w.selects(operation, obj)
            and any(n not in reviewed for n in doing[w.name])
        }
        if absent:
            reasons = tuple(
                f"webhook {entry} is not called: "
                + missed.get(entry, "no webhook configuration in the cluster registers it")
                for entry in absent.values()
            )
            return Unserved(
                False,
                f"the API server will let {what} through unreviewed: {'; '.join(reasons)} ({_unmade(list(absent))})",
                reasons,
                "`gpuctl doctor` compares the registered webhook configurations with those GPUStack's worker "
                "registers at start"
                if serving.worker
                else "`gpuctl doctor` compares the registered webhook configurations with this version's and prints "
                "the patch that registers them",
            )
    return None


def pods_review(
    serving: OperatorServing | None, pods: Sequence[tuple[str, Mapping[str, str]]], namespace: str
) -> Unserved | None:
    """What the API server does with Pods still to be created (``pods``: what they are, e.g. "the Pod", and their
    labels) in ``namespace``, where gpuctl's webhooks do not review them: the decisive answer (a certain refusal,
    else a possible one, else let through unreviewed), or None where they are reviewed or nothing is known."""
    if serving is None or not (serving.registered or serving.down()):
        return None  # nothing to say: served, and no configuration read whole
    found = [
        got
        for what, labels in pods
        if (
            got := unserved_review(
                serving, "pods", {str(k): str(v) for k, v in labels.items()}, what, namespace=namespace
            )
        )
        is not None
    ]
    refused = [u for u in found if u.refused]
    if refused:
        return next((u for u in refused if u.known), refused[0])
    if not found:
        return None
    return replace(found[0], evidence=tuple(e for u in found for e in u.evidence))


class PodSetLike(Protocol):
    """A PodSet as :func:`uncreated_pods` reads it (a Workload's, or a submission's)."""

    @property
    def name(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def labels(self) -> Mapping[str, str]: ...


def uncreated_pods(podsets: Sequence[PodSetLike], own_pods: Sequence[Pod]) -> list[tuple[str, Mapping[str, str]]]:
    """The PodSets some of whose Pods are not created yet (a Job's, before admission), as :func:`pods_review` takes
    them: their Pods reach the Pod webhook when they are. A Pod that exists passed it."""
    out: list[tuple[str, Mapping[str, str]]] = []
    for ps in podsets:
        made = len(own_pods) if len(podsets) == 1 else sum(1 for p in own_pods if p.podset == ps.name)
        if made < ps.count:
            out.append((f"the Pods of pod set {ps.name} still to be created", ps.labels))
    return out


def _unmade(names: Sequence[str]) -> str:
    """What is not done to an object the webhooks ``names`` do not review."""
    if any(n == "pod-accelerators.gpustack.ai" or n.endswith(".core.v1.pod") for n in names):
        return "no fold, no pin, no request rule checked"
    return "none of the webhook's changes or checks is made"


def unserved_check(serving: OperatorServing | None) -> str | None:
    """Why no verdict of the ``gpustack-node-devices`` check is being written, or None while the operator (or
    GPUStack's worker) serves."""
    why = serving.down() if serving is not None else None
    if serving is None or why is None:
        return None
    return (
        f"{serving.server} does not run: {why}; the {naming.NODE_DEVICES_CHECK} check writes no verdict, and Kueue "
        "keeps the Workload at the check until it does"
    )


def operator_fix_hint(serving: OperatorServing | None) -> str:
    """Where to look when the operator (or GPUStack's worker) does not serve."""
    if serving is not None and serving.worker:
        namespace = serving.lease.namespace if serving.lease else gpustack.WORKER_NAMESPACE
        return (
            f"GPUStack's worker serves them: kubectl -n {namespace} get pods -l {gpustack.WORKER_SELECTOR}, and its "
            "logs; it renews its Lease while it runs"
        )
    namespace = serving.lease.namespace if serving is not None and serving.lease else naming.OPERATOR_NAMESPACE
    return operator_fix(namespace, serving.deployed if serving is not None else True)


def whereabouts(
    deployment: DeploymentRecord | None, lease: LeaseRecord | None, entries: Sequence[WebhookEntry], now: float
) -> dict[str, object]:
    """Where the operator runs and which version, found as ``doctor`` finds it: its Deployment, else its leader
    Lease or its webhook configurations (an operator outside the cluster, its webhooks called by URL)."""
    ours = [e for e in entries if e.ours]
    urls = sorted({url_base(e.url) for e in ours if e.url})
    services = sorted({f"{e.service[0]}/{e.service[1]}:{e.service[2]}" for e in ours if e.service is not None})
    runs = "deployment" if deployment is not None else "process" if (lease is not None or urls) else "none"
    serving = OperatorServing(tuple(entries), lease, now)
    renewed = epoch_seconds(lease.renew_time) if lease is not None and lease.renew_time else None
    out: dict[str, object] = {
        "runs": runs,
        "version": (deployment.version if deployment else "") or (lease.version if lease else "") or None,
        "namespace": deployment.namespace if deployment else (lease.namespace if lease else None),
        "webhooks": urls + services,
    }
    if deployment is not None:
        out["deployment"] = {"name": deployment.name, "replicas": deployment.replicas, "ready": deployment.ready}
    if lease is not None:
        out["leader"] = {
            "holder": lease.holder,
            "renewedSecondsAgo": None if renewed is None else round(now - renewed, 1),
            "current": serving.down_for() is None and renewed is not None,
        }
    return out


def whereabouts_text(found: Mapping[str, object]) -> str:
    """One line for ``version --show-cluster``."""
    version = found.get("version") or "unknown version"
    leader = found.get("leader")
    lead = ""
    if isinstance(leader, Mapping):
        ago = leader.get("renewedSecondsAgo")
        state = "" if leader.get("current") else ", lapsed: no replica serves"
        lead = f"; leader {leader.get('holder') or '?'}, Lease renewed {ago} s ago{state}"
    if found.get("runs") == "deployment":
        d = found.get("deployment")
        assert isinstance(d, Mapping)
        return (
            f"operator {version} (deployment {found.get('namespace')}/{d.get('name')}, {d.get('ready')}/"
            f"{d.get('replicas')} ready{lead})"
        )
    if found.get("runs") == "process":
        hooks = found.get("webhooks")
        named = [str(h) for h in hooks] if isinstance(hooks, list) else []
        at = f"webhooks called at {', '.join(named)}" if named else "no webhook registered"
        return f"operator {version} (outside the cluster: {at}{lead})"
    return (
        f"operator: not found (no Deployment {naming.OPERATOR_NAMESPACE}/{naming.OPERATOR_NAME}, no leader Lease, no "
        "webhook configuration of gpuctl's)"
    )

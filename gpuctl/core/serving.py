"""Whether the operator serves its webhooks and its AdmissionCheck now, and what the API server and Kueue do when it
does not: a webhook failing closed (``failurePolicy: Fail``) makes the API server refuse what it would review, one
failing open (``Ignore``) lets it through unreviewed, and Workloads wait at the check while no verdict is written.

The operator's leader renews its Lease; a Lease not renewed within its duration means no replica leads (the process
is stopped, hung or gone). Without a Lease (an operator run without leader election) nothing is claimed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuctl.core import naming
from gpuctl.core.doctor.records import (
    DeploymentRecord,
    LeaseRecord,
    WebhookEntry,
    duration_text,
    operator_fix,
    url_base,
)
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
        return (
            f"the operator's Lease {self.lease.namespace}/{self.lease.name} was last renewed "
            f"{duration_text(self.now - renewed)} ago and lapses after {self.lease.duration_seconds} s: no replica "
            "serves"
        )


def selector_matches(selector: Mapping[str, object], labels: Mapping[str, str]) -> bool:
    """A label selector (``matchLabels`` and ``matchExpressions``) against labels; an empty one matches all."""
    match_labels = selector.get("matchLabels")
    if isinstance(match_labels, Mapping) and any(labels.get(str(k)) != str(v) for k, v in match_labels.items()):
        return False
    expressions = selector.get("matchExpressions")
    for e in expressions if isinstance(expressions, list) else []:
        if not isinstance(e, Mapping):
            continue
        key, op = str(e.get("key") or ""), str(e.get("operator") or "")
        values = [str(v) for v in e.get("values") or []] if isinstance(e.get("values"), list) else []
        present = key in labels
        if (
            (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
            or (op == "In" and (not present or labels[key] not in values))
            or (op == "NotIn" and present and labels[key] in values)
        ):
            return False
    return True


def reviewing(
    entries: Sequence[WebhookEntry], resource: str, operation: str, labels: Mapping[str, str]
) -> list[WebhookEntry]:
    """The entries of the operator's configurations the API server calls for ``operation`` on an object of
    ``resource`` (plural) with ``labels``: a rule covers them and the object selector matches."""
    out = []
    for e in entries:
        if e.configuration not in (naming.MUTATING_CONFIGURATION, naming.VALIDATING_CONFIGURATION):
            continue
        covered = any(
            (resource in r.resources or "*" in r.resources) and (operation in r.operations or "*" in r.operations)
            for r in e.rules
        )
        if covered and selector_matches(e.object_selector, labels):
            out.append(e)
    return out


@dataclass(frozen=True, slots=True)
class Unserved:
    """What the API server does with an object a webhook the operator does not serve would review."""

    refused: bool
    """True where a webhook fails closed: the API server refuses the object."""
    summary: str
    evidence: tuple[str, ...]
    hint: str


def unserved_review(
    serving: OperatorServing | None, resource: str, labels: Mapping[str, str], what: str
) -> Unserved | None:
    """None while the operator serves (or nothing is known); else what the API server does with ``what`` (e.g.
    "the Pod") on CREATE: refused when a webhook that would review it fails closed, let through unreviewed when the
    webhooks that would fail open."""
    why = serving.down() if serving is not None else None
    if serving is None or why is None:
        return None
    called = reviewing(serving.entries, resource, "CREATE", labels)
    if not called:
        return None
    namespace = serving.lease.namespace if serving.lease else naming.OPERATOR_NAMESPACE
    hint = operator_fix(namespace, serving.deployed)
    closed = [e for e in called if e.failure_policy != "Ignore"]
    said = [
        f"webhook {e.name} ({e.configuration}) reviews it, failurePolicy {e.failure_policy or 'Fail'}" for e in called
    ]
    evidence = (*said, why)
    if closed:
        names = ", ".join(e.name for e in closed)
        return Unserved(
            True,
            f"the API server will refuse {what}: webhook {names} fails closed (failurePolicy Fail) and the operator "
            "does not serve it",
            evidence,
            hint,
        )
    names = ", ".join(e.name for e in called)
    return Unserved(
        False,
        f"the API server will let {what} through unreviewed: webhook {names} fails open (failurePolicy Ignore) and "
        "the operator does not serve it (no fold, no pin)",
        evidence,
        hint,
    )


def unserved_check(serving: OperatorServing | None) -> str | None:
    """Why no verdict of the ``gpustack-node-devices`` check is being written, or None while the operator serves."""
    why = serving.down() if serving is not None else None
    if why is None:
        return None
    return (
        f"the operator does not run: {why}; the {naming.NODE_DEVICES_CHECK} check writes no verdict, and Kueue keeps "
        "the Workload at the check until it does"
    )


def operator_fix_hint(serving: OperatorServing | None) -> str:
    """Where to look when the operator does not serve."""
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

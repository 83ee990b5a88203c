"""Lifecycle of pools and instances: the deletion guard of the webhooks, the InstanceType phase, the running-instance
stop rule, and the patch plans of hold, drain, resume, stop and start.

Who owns what (the plans follow it):

- ``InstanceType.spec.inactive`` is the admin switch; the InstanceType reconciler turns it into the ClusterQueue's
  ``Hold`` (and ``None`` back), and backfills ``inactive=true`` whenever the queue is stopped by any means.
- ``ClusterQueue.spec.stopPolicy=HoldAndDrain`` drains: Kueue evicts the admitted workloads and admits none.
- ``Instance.spec.stop`` stops and starts one instance.

A plan is a record, never an action: the CLI and the operator send it with their ``Writer``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Concatenate, Final, ParamSpec

from gpuctl.core.admission import JSON, Admission, allow
from gpuctl.core.compat import StrEnum
from gpuctl.core.errors import GpuctlError
from gpuctl.core.workloads import ActiveCondition

# ----------------------------------------------------------------------------------------------- vocabulary

INSTANCETYPE_API_VERSION: Final = "worker.gpustack.ai/v1alpha1"
INSTANCE_API_VERSION: Final = "worker.gpustack.ai/v1alpha1"
CLUSTER_QUEUE_API_VERSION: Final = "kueue.x-k8s.io/v1beta2"

CANNOT_STOP_STARTING: Final = "cannot stop starting instance"
CAN_ONLY_START_STOPPED: Final = "can only start stopped instance"
STOP_LOG_MESSAGE: Final = "stop instance as its instance type is gone, deleting, or draining"


class StopPolicy(StrEnum):
    """A ClusterQueue's ``spec.stopPolicy``; an absent or unknown value reads as ``None``."""

    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"

    @classmethod
    def read(cls, value: object) -> StopPolicy:
        for policy in cls:
            if policy.value == value:
                return policy
        return cls.NONE


class Phase(StrEnum):
    """``InstanceType.status.phase``."""

    ACTIVE = "Active"
    INACTIVE = "Inactive"
    DRAINING = "Draining"
    PREPARING = "Preparing"


class InstancePhase(StrEnum):
    """``Instance.status.phase`` values the rules read (a running instance may also show a Pod-status summary)."""

    STARTING = "Starting"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    READY = "Ready"
    DELETING = "Deleting"


# ----------------------------------------------------------------------------------------------- deletion guard

Operation = str
"""An AdmissionReview operation: ``CREATE``, ``UPDATE``, ``DELETE`` or ``CONNECT``."""

P = ParamSpec("P")
Handler = Callable[Concatenate[Operation, Any, P], Admission]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def is_deleting(obj: Any) -> bool:
    """Whether an object carries ``metadata.deletionTimestamp``."""
    return bool(_mapping(_mapping(obj).get("metadata")).get("deletionTimestamp"))


def skipped_for_deletion(operation: Operation, obj: Any, *, receives_deletion_updates: bool) -> bool:
    """An UPDATE of an object being deleted is neither validated nor defaulted, unless the handler opts out.

    CREATE and DELETE are never skipped.
    """
    return operation == "UPDATE" and not receives_deletion_updates and is_deleting(obj)


def deletion_guard(handler: Handler[P], *, receives_deletion_updates: bool) -> Handler[P]:
    """Wrap a webhook handler ``(operation, object, ...)`` in the deletion-timestamp guard.

    With ``receives_deletion_updates=False`` (the guard kept), an UPDATE of an object carrying
    ``metadata.deletionTimestamp`` is allowed unchanged without running the handler: an update that clears a
    finalizer is an UPDATE, and a rule that reads another object could otherwise hold an object past its own
    teardown. ``True`` opts out: the handler's rules still run while the object is deleted.
    """

    @functools.wraps(handler)
    def guarded(operation: Operation, obj: Any, /, *args: P.args, **kwargs: P.kwargs) -> Admission:
        if skipped_for_deletion(operation, obj, receives_deletion_updates=receives_deletion_updates):
            return allow()
        return handler(operation, obj, *args, **kwargs)

    return guarded


# ----------------------------------------------------------------------------------------------- InstanceType phase


def instancetype_phase(
    stop_policy: str, reservations_outstanding: bool, active: ActiveCondition | None = None
) -> Phase:
    """``Inactive`` when the queue is held, or drained with nothing left reserved; ``Draining`` while a drain still
    has reservations; otherwise what the queue's ``Active`` condition says (``Active``; ``Inactive`` when False,
    ``Preparing`` when Unknown), as GPUStack's status writer summarises the queue."""
    return Phase(queue_summary(stop_policy, reservations_outstanding, active)[0] or Phase.ACTIVE.value)


def queue_summary(stop_policy: str, reservations_outstanding: bool, active: ActiveCondition | None) -> tuple[str, str]:
    """(phase, message) of an InstanceType from its ClusterQueue, as GPUStack's status writer writes them: its stop
    policy first (``HoldAndDrain`` is ``Draining`` while reservations remain, then ``Inactive``; ``Hold`` is
    ``Inactive``), else its ``Active`` condition — phase by its status, Kueue's message with its first letter made
    upper-case and a full stop added. A queue with no conditions yet reads ``Active`` with no message; one whose
    conditions lack ``Active`` reads no phase."""
    policy = StopPolicy.read(stop_policy)
    if policy is StopPolicy.HOLD_AND_DRAIN:
        if reservations_outstanding:
            return Phase.DRAINING.value, "cluster queue is draining admitted workloads"
        return Phase.INACTIVE.value, "cluster queue is held and drained"
    if policy is StopPolicy.HOLD:
        return Phase.INACTIVE.value, "cluster queue is held"
    if active is None:
        return Phase.ACTIVE.value, ""
    if not active.present:
        return "", ""
    phase = {"True": Phase.ACTIVE.value, "False": Phase.INACTIVE.value}.get(active.status, Phase.PREPARING.value)
    return phase, _sentence(active.message)


def _sentence(message: str) -> str:
    """GPUStack's formatting of a condition's message: the first ASCII letter upper-cased, a full stop added unless
    it ends in one (or ``!``, ``?``)."""
    if not message:
        return ""
    for i, ch in enumerate(message):
        if "a" <= ch <= "z" or "A" <= ch <= "Z":
            message = message[:i] + ch.upper() + message[i + 1 :]
            break
    return message if message[-1] in ".!?" else message + "."


# ----------------------------------------------------------------------------------------------- running-instance stop


@dataclass(frozen=True, slots=True)
class StopDecision:
    stop: bool
    reason: str
    cause: str = ""
    """Why it stops, in one CamelCase word (the reason of the operator's Event): ``InstanceTypeGone``,
    ``InstanceTypeDeleting`` or ``HoldAndDrain``."""


def should_stop_instance(instancetype_exists: bool, instancetype_deleting: bool, stop_policy: str) -> StopDecision:
    """Whether the worker stops an Instance (``spec.stop=true``) instead of (re)creating its Pod.

    It stops when its InstanceType is gone, being deleted, or its ClusterQueue is ``HoldAndDrain``. An admin
    ``Hold`` is not a stop: running Pods keep running and a new Instance waits in its queue. The rule keys on the
    stop policy, not the phase: the phase reads ``Inactive`` for both a hold and a finished drain, and a fast drain
    is over before ``Draining`` is ever observed.
    """
    if not instancetype_exists:
        return StopDecision(True, "its instance type is gone", "InstanceTypeGone")
    if instancetype_deleting:
        return StopDecision(True, "its instance type is being deleted", "InstanceTypeDeleting")
    policy = StopPolicy.read(stop_policy)
    if policy is StopPolicy.HOLD_AND_DRAIN:
        return StopDecision(True, "its instance type's queue is draining (stopPolicy HoldAndDrain)", "HoldAndDrain")
    if policy is StopPolicy.HOLD:
        return StopDecision(
            False, "its instance type's queue is held (stopPolicy Hold): running instances keep running"
        )
    return StopDecision(False, "its instance type's queue admits workloads")


# ----------------------------------------------------------------------------------------------- patch plans


class PatchType(StrEnum):
    """The ``Content-Type`` a patch is sent with."""

    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    api_version: str
    kind: str
    namespace: str | None
    """None for a cluster-scoped object."""
    name: str

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


@dataclass(frozen=True, slots=True)
class PatchPlan:
    """One patch to one object, with its optimistic-concurrency precondition."""

    target: ObjectRef
    patch_type: PatchType
    patch: JSON
    """The change alone (a JSON merge patch)."""
    resource_version: str | None
    """The ``metadata.resourceVersion`` the change was planned against; None when the object carried none."""
    no_op: bool
    """The object is already in the desired state: a re-run sends nothing."""
    description: str

    def body(self) -> JSON:
        """The merge patch to send: the change plus the ``resourceVersion`` precondition, so the API server answers
        409 Conflict if the object moved since it was read."""
        body: JSON = {k: v for k, v in self.patch.items() if k != "metadata"}
        metadata = dict(_mapping(self.patch.get("metadata")))
        if self.resource_version:
            metadata["resourceVersion"] = self.resource_version
        if metadata:
            body["metadata"] = metadata
        return body


class PlanRefused(GpuctlError, ValueError):
    """The change cannot be made from the object's current state; the message is the webhook rule's."""


def _ref(obj: Any, default_api_version: str, kind: str, *, namespaced: bool) -> ObjectRef:
    meta = _mapping(_mapping(obj).get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"the {kind} has no metadata.name")
    namespace = meta.get("namespace") if namespaced else None
    if namespaced and (not isinstance(namespace, str) or not namespace):
        raise ValueError(f"the {kind} {name} has no metadata.namespace")
    api_version = _mapping(obj).get("apiVersion")
    return ObjectRef(
        api_version if isinstance(api_version, str) and api_version else default_api_version,
        kind,
        namespace if namespaced else None,
        name,
    )


def _resource_version(obj: Any) -> str | None:
    value = _mapping(_mapping(obj).get("metadata")).get("resourceVersion")
    return value if isinstance(value, str) and value else None


def _spec(obj: Any) -> Mapping[str, Any]:
    return _mapping(_mapping(obj).get("spec"))


def _plan(obj: Any, target: ObjectRef, patch: JSON, no_op: bool, description: str) -> PatchPlan:
    return PatchPlan(target, PatchType.MERGE, patch, _resource_version(obj), no_op, description)


def _instancetype_inactive(instancetype: Any, inactive: bool) -> PatchPlan:
    target = _ref(instancetype, INSTANCETYPE_API_VERSION, "InstanceType", namespaced=False)
    already = (_spec(instancetype).get("inactive") is True) == inactive
    if inactive:
        what = (
            f"set {target} spec.inactive=true: the worker's InstanceType reconciler then sets ClusterQueue "
            f"{target.name} stopPolicy Hold (new workloads wait, running workloads keep running)"
        )
    else:
        what = (
            f"set {target} spec.inactive=false: the worker's InstanceType reconciler then sets ClusterQueue "
            f"{target.name} stopPolicy None (it admits workloads again)"
        )
    if already:
        what = f"{target} is already {'inactive' if inactive else 'active'}; nothing to change"
    return _plan(instancetype, target, {"spec": {"inactive": inactive}}, already, what)


def _cluster_queue_of(instancetype: Any, cluster_queue: Any) -> ObjectRef:
    it = _ref(instancetype, INSTANCETYPE_API_VERSION, "InstanceType", namespaced=False)
    cq = _ref(cluster_queue, CLUSTER_QUEUE_API_VERSION, "ClusterQueue", namespaced=False)
    if cq.name != it.name:
        raise ValueError(f"ClusterQueue {cq.name} does not back InstanceType {it.name}: the two share one name")
    return cq


def plan_instancetype_spec(instancetype: Any, change: Mapping[str, Any]) -> PatchPlan:
    """Set InstanceType spec fields (the mutable ones: displayName and inactive); only what differs is
    sent, and nothing when all already match."""
    target = _ref(instancetype, INSTANCETYPE_API_VERSION, "InstanceType", namespaced=False)
    spec = _spec(instancetype)
    delta = {k: v for k, v in change.items() if spec.get(k) != v}
    what = (
        f"set {target} " + ", ".join(f"spec.{k}={json.dumps(v)}" for k, v in delta.items())
        if delta
        else f"{target} already matches; nothing to change"
    )
    return _plan(instancetype, target, {"spec": delta}, not delta, what)


def plan_hold(instancetype: Any) -> PatchPlan:
    """Take a pool out of service: InstanceType ``spec.inactive=true``; the InstanceType reconciler puts the queue
    on ``Hold``. Running workloads keep running."""
    return _instancetype_inactive(instancetype, True)


def plan_activate(instancetype: Any) -> PatchPlan:
    """Put a pool back in service on the InstanceType side: ``spec.inactive=false`` (a drained queue stays drained;
    ``plan_resume`` releases both)."""
    return _instancetype_inactive(instancetype, False)


def plan_drain(instancetype: Any, cluster_queue: Any) -> PatchPlan:
    """Drain a pool: ClusterQueue ``spec.stopPolicy=HoldAndDrain``. Kueue evicts the admitted workloads, and the
    worker stops the type's Instances."""
    target = _cluster_queue_of(instancetype, cluster_queue)
    already = StopPolicy.read(_spec(cluster_queue).get("stopPolicy")) is StopPolicy.HOLD_AND_DRAIN
    what = (
        f"{target} is already draining (stopPolicy HoldAndDrain); nothing to change"
        if already
        else f"set {target} spec.stopPolicy=HoldAndDrain: Kueue evicts its admitted workloads and admits none, "
        "and the worker stops the instances of the type"
    )
    return _plan(cluster_queue, target, {"spec": {"stopPolicy": StopPolicy.HOLD_AND_DRAIN.value}}, already, what)


def plan_resume(instancetype: Any, cluster_queue: Any) -> tuple[PatchPlan, PatchPlan]:
    """Return a pool to service, in this order: ClusterQueue ``stopPolicy: None``, then InstanceType
    ``inactive: false``.

    The order matters: the InstanceType reconciler backfills ``inactive=true`` while the queue is stopped, so
    clearing ``inactive`` first would be undone before the queue is released. Stopped Instances stay stopped; start
    them one by one.
    """
    target = _cluster_queue_of(instancetype, cluster_queue)
    policy = StopPolicy.read(_spec(cluster_queue).get("stopPolicy"))
    already = policy is StopPolicy.NONE
    what = (
        f"{target} already admits workloads (stopPolicy None); nothing to change"
        if already
        else f"set {target} spec.stopPolicy=None (was {policy.value}): the queue admits workloads again"
    )
    queue = _plan(cluster_queue, target, {"spec": {"stopPolicy": StopPolicy.NONE.value}}, already, what)
    return queue, _instancetype_inactive(instancetype, False)


def _instance_phase(instance: Any) -> str:
    phase = _mapping(_mapping(instance).get("status")).get("phase")
    return phase if isinstance(phase, str) else ""


def plan_stop(instance: Any, *, running_instance_stop: bool = False) -> PatchPlan:
    """Stop an Instance: ``spec.stop=true`` (its Pod is deleted). Refused while it is ``Starting``, except for the
    running-instance stop (``running_instance_stop``: its InstanceType is gone or being deleted, or its queue drains),
    which stops an Instance whose Pod can never be admitted however far it got."""
    target = _ref(instance, INSTANCE_API_VERSION, "Instance", namespaced=True)
    if _spec(instance).get("stop") is True:
        phase = _instance_phase(instance)
        said = (
            f"{target} is already stopped; nothing to change"
            if phase == InstancePhase.STOPPED
            else f"{target} already has spec.stop=true, but its phase is {phase or 'unknown'}, not Stopped: the "
            "operator deletes its Pod and then records Stopped; nothing to change (`gpuctl doctor` checks the operator)"
        )
        return _plan(instance, target, {"spec": {"stop": True}}, True, said)
    if _instance_phase(instance) == InstancePhase.STARTING and not running_instance_stop:
        raise PlanRefused(CANNOT_STOP_STARTING)
    what = f"set {target} spec.stop=true: its Pod is deleted and the instance ends Stopped"
    return _plan(instance, target, {"spec": {"stop": True}}, False, what)


def plan_start(instance: Any) -> PatchPlan:
    """Start an Instance: ``spec.stop=false``, only from phase ``Stopped``."""
    target = _ref(instance, INSTANCE_API_VERSION, "Instance", namespaced=True)
    if _spec(instance).get("stop") is not True:
        return _plan(
            instance, target, {"spec": {"stop": False}}, True, f"{target} is already started; nothing to change"
        )
    if _instance_phase(instance) != InstancePhase.STOPPED:
        raise PlanRefused(CAN_ONLY_START_STOPPED)
    what = f"set {target} spec.stop=false: its Pod is created again and waits for its queue"
    return _plan(instance, target, {"spec": {"stop": False}}, False, what)

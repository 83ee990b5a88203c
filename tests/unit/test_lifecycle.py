"""Lifecycle: the deletion guard, the InstanceType phase, the running-instance stop rule and the patch plans."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.core.admission import Admission, allow, deny
from gpuctl.core.lifecycle import (
    CAN_ONLY_START_STOPPED,
    CANNOT_STOP_STARTING,
    ObjectRef,
    PatchPlan,
    PatchType,
    Phase,
    PlanRefused,
    StopDecision,
    deletion_guard,
    instancetype_phase,
    plan_drain,
    plan_hold,
    plan_resume,
    plan_start,
    plan_stop,
    queue_summary,
    should_stop_instance,
)
from gpuctl.core.workloads import ActiveCondition

NAME = "gpustack--nvidia-a10g-linux-amd64"


def message(stop_policy: str, outstanding: bool, active: Any = None) -> str:
    """The sentence that goes with the phase (``status.phaseMessage``)."""
    return queue_summary(stop_policy, outstanding, active)[1]


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def instancetype(*, inactive: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"acceleratable": True, "acceleratorGroup": "nvidia-a10g"}
    if inactive is not None:
        spec["inactive"] = inactive
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": NAME, "resourceVersion": "41"},
        "spec": spec,
    }


def cluster_queue(stop_policy: str | None = None, name: str = NAME) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceGroups": []}
    if stop_policy is not None:
        spec["stopPolicy"] = stop_policy
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "resourceVersion": "99"},
        "spec": spec,
    }


def instance(*, stop: bool, phase: str) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "metadata": {"name": "box", "namespace": "team-a", "resourceVersion": "7"},
        "spec": {"type": NAME, "stop": stop},
        "status": {"phase": phase},
    }


def applied(obj: dict[str, Any], plan: PatchPlan) -> dict[str, Any]:
    assert plan.patch_type is PatchType.MERGE
    result: dict[str, Any] = merge(obj, plan.patch)
    return result


# ----------------------------------------------------------------------------------------------- deletion guard


def recording_rule(calls: list[str]) -> Any:
    def rule(operation: str, obj: Any, verdict: bool) -> Admission:
        calls.append(operation)
        return allow(obj) if verdict else deny("refused by the rule")

    return rule


DELETING = {"metadata": {"name": "x", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
LIVE = {"metadata": {"name": "x"}}


def test_a_kept_guard_skips_an_update_of_an_object_being_deleted() -> None:
    calls: list[str] = []
    guarded = deletion_guard(recording_rule(calls), receives_deletion_updates=False)
    result = guarded("UPDATE", DELETING, False)
    assert result.allowed and result.mutated is None and calls == []


def test_a_kept_guard_still_runs_create_delete_and_live_updates() -> None:
    calls: list[str] = []
    guarded = deletion_guard(recording_rule(calls), receives_deletion_updates=False)
    assert not guarded("CREATE", DELETING, False).allowed
    assert not guarded("DELETE", DELETING, False).allowed
    assert not guarded("UPDATE", LIVE, False).allowed
    assert calls == ["CREATE", "DELETE", "UPDATE"]


def test_an_opted_out_handler_still_validates_while_deleting() -> None:
    calls: list[str] = []
    guarded = deletion_guard(recording_rule(calls), receives_deletion_updates=True)
    assert guarded("UPDATE", DELETING, False).message == "refused by the rule"
    assert calls == ["UPDATE"]


@pytest.mark.parametrize("obj", [None, 3, "x", [], {"metadata": None}, {"metadata": {"deletionTimestamp": None}}])
def test_the_guard_reads_any_object(obj: Any) -> None:
    calls: list[str] = []
    guarded = deletion_guard(recording_rule(calls), receives_deletion_updates=False)
    assert guarded("UPDATE", obj, True).allowed
    assert calls == ["UPDATE"]


# ----------------------------------------------------------------------------------------------- phase


@pytest.mark.parametrize(
    ("policy", "outstanding", "phase"),
    [
        ("None", False, Phase.ACTIVE),
        ("None", True, Phase.ACTIVE),
        ("", True, Phase.ACTIVE),
        ("Hold", False, Phase.INACTIVE),
        ("Hold", True, Phase.INACTIVE),
        ("HoldAndDrain", True, Phase.DRAINING),
        ("HoldAndDrain", False, Phase.INACTIVE),
    ],
)
def test_instancetype_phase(policy: str, outstanding: bool, phase: Phase) -> None:
    assert instancetype_phase(policy, outstanding) is phase


def test_phase_and_message_are_gpustacks_summary_of_the_queue() -> None:
    assert message("Hold", True) == "cluster queue is held"
    assert message("HoldAndDrain", True) == "cluster queue is draining admitted workloads"
    assert message("HoldAndDrain", False) == "cluster queue is held and drained"
    # Otherwise the queue's Active condition, its message made a sentence; no condition yet reads Active.
    active = ActiveCondition("True", "can admit new workloads")
    assert (instancetype_phase("None", False, active), message("None", False, active)) == (
        Phase.ACTIVE,
        "Can admit new workloads.",
    )
    stopped = ActiveCondition("False", "Can't admit new workloads: FlavorNotFound!")
    assert instancetype_phase("None", False, stopped) is Phase.INACTIVE
    assert message("None", False, stopped) == "Can't admit new workloads: FlavorNotFound!"
    assert instancetype_phase("None", False, ActiveCondition("Unknown", "")) is Phase.PREPARING
    assert (instancetype_phase("None", False), message("None", False)) == (Phase.ACTIVE, "")


# ----------------------------------------------------------------------------------------------- stop rule


@pytest.mark.parametrize(
    ("exists", "deleting", "policy", "stop"),
    [
        (False, False, "None", True),
        (True, True, "None", True),
        (True, False, "HoldAndDrain", True),
        (True, False, "Hold", False),
        (True, False, "None", False),
        (True, False, "", False),
    ],
)
def test_should_stop_instance(exists: bool, deleting: bool, policy: str, stop: bool) -> None:
    decision = should_stop_instance(exists, deleting, policy)
    assert isinstance(decision, StopDecision)
    assert decision.stop is stop and decision.reason


def test_an_admin_hold_is_not_a_stop() -> None:
    decision = should_stop_instance(True, False, "Hold")
    assert not decision.stop and "keep running" in decision.reason


# ----------------------------------------------------------------------------------------------- hold


def test_plan_hold_sets_inactive_with_the_resource_version() -> None:
    obj = instancetype()
    plan = plan_hold(obj)
    assert plan.target == ObjectRef("worker.gpustack.ai/v1alpha1", "InstanceType", None, NAME)
    assert plan.patch == {"spec": {"inactive": True}} and plan.resource_version == "41" and not plan.no_op
    assert plan.body() == {"spec": {"inactive": True}, "metadata": {"resourceVersion": "41"}}
    assert "spec.inactive=true" in plan.description and "Hold" in plan.description
    assert applied(obj, plan)["spec"]["inactive"] is True


def test_plan_hold_on_an_inactive_type_is_a_no_op() -> None:
    plan = plan_hold(instancetype(inactive=True))
    assert plan.no_op and "already inactive" in plan.description


# ----------------------------------------------------------------------------------------------- drain


def test_plan_drain_sets_hold_and_drain_on_the_backing_queue() -> None:
    queue = cluster_queue()
    plan = plan_drain(instancetype(), queue)
    assert plan.target == ObjectRef("kueue.x-k8s.io/v1beta2", "ClusterQueue", None, NAME)
    assert plan.patch == {"spec": {"stopPolicy": "HoldAndDrain"}} and plan.resource_version == "99"
    assert not plan.no_op and "evicts" in plan.description
    assert applied(queue, plan)["spec"]["stopPolicy"] == "HoldAndDrain"


def test_plan_drain_on_a_draining_queue_is_a_no_op() -> None:
    assert plan_drain(instancetype(), cluster_queue("HoldAndDrain")).no_op


def test_plan_drain_refuses_a_queue_of_another_type() -> None:
    with pytest.raises(ValueError, match="does not back InstanceType"):
        plan_drain(instancetype(), cluster_queue(name="other"))


# ----------------------------------------------------------------------------------------------- resume


def test_plan_resume_releases_the_queue_first_then_the_type() -> None:
    queue_plan, type_plan = plan_resume(instancetype(inactive=True), cluster_queue("HoldAndDrain"))
    assert queue_plan.target.kind == "ClusterQueue" and type_plan.target.kind == "InstanceType"
    assert queue_plan.patch == {"spec": {"stopPolicy": "None"}} and not queue_plan.no_op
    assert "was HoldAndDrain" in queue_plan.description
    assert type_plan.patch == {"spec": {"inactive": False}} and not type_plan.no_op


def test_plan_resume_of_an_active_pool_is_a_no_op_re_run() -> None:
    queue_plan, type_plan = plan_resume(instancetype(inactive=False), cluster_queue("None"))
    assert queue_plan.no_op and type_plan.no_op
    queue_plan, type_plan = plan_resume(instancetype(), cluster_queue())
    assert queue_plan.no_op and type_plan.no_op


# ----------------------------------------------------------------------------------------------- stop and start


@pytest.mark.parametrize("phase", ["Ready", "Running", "Stopping", ""])
def test_plan_stop_sets_stop(phase: str) -> None:
    obj = instance(stop=False, phase=phase)
    plan = plan_stop(obj)
    assert plan.target == ObjectRef("worker.gpustack.ai/v1", "Instance", "team-a", "box")
    assert plan.patch == {"spec": {"stop": True}} and plan.resource_version == "7" and not plan.no_op
    assert applied(obj, plan)["spec"]["stop"] is True
    assert str(plan.target) == "Instance team-a/box"


def test_plan_stop_refuses_a_starting_instance() -> None:
    with pytest.raises(PlanRefused, match=CANNOT_STOP_STARTING):
        plan_stop(instance(stop=False, phase="Starting"))


def test_the_running_instance_stop_plans_a_stop_of_a_starting_instance() -> None:
    plan = plan_stop(instance(stop=False, phase="Starting"), running_instance_stop=True)
    assert plan.patch == {"spec": {"stop": True}} and not plan.no_op


def test_plan_stop_of_a_stopped_instance_is_a_no_op() -> None:
    plan = plan_stop(instance(stop=True, phase="Stopped"))
    assert plan.no_op and plan.description == "Instance team-a/box is already stopped; nothing to change"


@pytest.mark.parametrize("phase", ["", "Stopping", "Ready"])
def test_a_second_stop_before_the_operator_finished_says_the_phase_not_stopped(phase: str) -> None:
    plan = plan_stop(instance(stop=True, phase=phase))
    assert plan.no_op and "already stopped" not in plan.description
    assert plan.description.startswith(
        f"Instance team-a/box already has spec.stop=true, but its phase is {phase or 'unknown'}, not Stopped"
    )


def test_plan_start_from_stopped_clears_stop() -> None:
    obj = instance(stop=True, phase="Stopped")
    plan = plan_start(obj)
    assert plan.patch == {"spec": {"stop": False}} and not plan.no_op
    assert applied(obj, plan)["spec"]["stop"] is False


@pytest.mark.parametrize("phase", ["Stopping", "Starting", ""])
def test_plan_start_refuses_anything_but_stopped(phase: str) -> None:
    with pytest.raises(PlanRefused) as refused:
        plan_start(instance(stop=True, phase=phase))
    assert str(refused.value) == CAN_ONLY_START_STOPPED == "can only start stopped instance"


def test_plan_start_of_a_started_instance_is_a_no_op() -> None:
    assert plan_start(instance(stop=False, phase="Ready")).no_op


def test_a_plan_needs_a_named_object() -> None:
    with pytest.raises(ValueError, match=r"no metadata\.name"):
        plan_hold({"spec": {}})
    with pytest.raises(ValueError, match=r"no metadata\.namespace"):
        plan_stop({"metadata": {"name": "box"}, "spec": {}})


def test_a_plan_without_a_resource_version_sends_no_precondition() -> None:
    obj = instancetype()
    del obj["metadata"]["resourceVersion"]
    plan = plan_hold(obj)
    assert plan.resource_version is None and plan.body() == {"spec": {"inactive": True}}


@settings(max_examples=100, deadline=None)
@given(st.booleans(), st.sampled_from(["Starting", "Stopping", "Stopped", "Ready", ""]))
def test_a_plan_applied_reaches_its_state_and_replanning_is_a_no_op(stop: bool, phase: str) -> None:
    obj = instance(stop=stop, phase=phase)
    for planner in (plan_stop, plan_start):
        try:
            plan = planner(obj)
        except PlanRefused:
            continue
        after = applied(obj, plan)
        after["status"] = {"phase": "Stopped" if after["spec"]["stop"] else "Ready"}
        assert planner(after).no_op


def test_plan_instancetype_spec_sends_only_what_differs() -> None:
    from gpuctl.core.lifecycle import plan_instancetype_spec

    it = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": "t", "resourceVersion": "7"},
        "spec": {"displayName": "A", "inactive": False},
    }
    plan = plan_instancetype_spec(it, {"displayName": "B", "inactive": False})
    assert plan.body() == {"spec": {"displayName": "B"}, "metadata": {"resourceVersion": "7"}} and not plan.no_op
    same = plan_instancetype_spec(it, {"displayName": "A"})
    assert same.no_op and same.description == "InstanceType t already matches; nothing to change"

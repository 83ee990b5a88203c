"""Write the ticket example snapshot (examples/ticket-4711.json): python -m tests.history_snapshot.

A dump of a small cluster consistent by construction (``tests.states``), taken at 12:00, in which team-a's Workload
``train`` waited 50 minutes for quota and 20 at the check (node a10g-1's cards held by others; the check's Retry a
series of 40), was admitted at 11:10 and runs since 11:11: the Events of both APIs and the times of its conditions
and its Pod's, for ``explain workload --history``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpuctl.core import naming
from tests.states import NS, State, whole

PATH = Path(__file__).resolve().parents[1] / "examples" / "ticket-4711.json"
TAKEN = "2026-12-01T12:00:00Z"
CQ = "gpustack--nvidia-a10g-linux-amd64"


def event(name: str, reason: str, note: str, at: str, **more: Any) -> dict[str, Any]:
    """An Event as the operator records it (``events.k8s.io/v1``)."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": NS, "creationTimestamp": at},
        "eventTime": at,
        "reportingController": "gpuctl.gpustack.ai/operator",
        "reportingInstance": "gpuctl-operator-7d9c-x2k4p",
        "action": "AdmissionCheck",
        "reason": reason,
        "regarding": {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": "train", "namespace": NS},
        "note": f"{naming.NODE_DEVICES_CHECK}: {note}",
        "type": "Warning" if reason == "Retry" else "Normal",
        **more,
    }


def core_event(name: str, kind: str, about: str, reason: str, message: str, at: str, component: str) -> dict[str, Any]:
    """An Event as Kueue, the scheduler and the kubelet record them (core ``v1``, whole seconds)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": NS, "creationTimestamp": at},
        "involvedObject": {"kind": kind, "name": about, "namespace": NS},
        "reason": reason,
        "message": message,
        "type": "Normal",
        "source": {"component": component},
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": 1,
    }


def build() -> dict[str, Any]:
    state = State().node("a10g-1", 4).hold("train", "a10g-1", whole(0, 1))
    objects = state.objects()
    for o in objects:
        meta = o["metadata"]
        if o["kind"] == "Workload" and meta["name"] == "train":
            meta["creationTimestamp"] = "2026-12-01T10:00:00Z"
            o["status"]["conditions"] = [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "QuotaReserved",
                    "message": f"Quota reserved in ClusterQueue {CQ}",
                    "lastTransitionTime": "2026-12-01T10:50:00Z",
                },
                {
                    "type": "Admitted",
                    "status": "True",
                    "reason": "Admitted",
                    "message": "The workload is admitted",
                    "lastTransitionTime": "2026-12-01T11:10:00Z",
                },
            ]
        if o["kind"] == "Pod" and meta["name"].startswith("train"):
            o.setdefault("status", {})["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T11:10:02Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T11:11:00Z"},
            ]
            pod = meta["name"]
    waited = "needs 2 whole cards, a10g-1 has 0 free of 4: all 4 hold slices; will retry as capacity frees"
    events = [
        core_event(
            "train.1",
            "Workload",
            "train",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {CQ}, wait time since queued was 3000s",
            "2026-12-01T10:50:00Z",
            "kueue-admission",
        ),
        event(
            "train.2",
            "Retry",
            waited,
            "2026-12-01T10:50:01.104233Z",
            series={"count": 40, "lastObservedTime": "2026-12-01T11:09:30.518302Z"},
        ),
        event(
            "train.3",
            "Ready",
            "the assigned flavor pool has enough free cards to place the request",
            "2026-12-01T11:09:59.730125Z",
        ),
        core_event(
            "train.4",
            "Workload",
            "train",
            "Admitted",
            f"Admitted by ClusterQueue {CQ}, wait time since reservation was 1200s",
            "2026-12-01T11:10:00Z",
            "kueue-workload-controller",
        ),
        core_event(
            "train.5",
            "Pod",
            pod,
            "Scheduled",
            f"Successfully assigned {NS}/{pod} to a10g-1",
            "2026-12-01T11:10:02Z",
            "default-scheduler",
        ),
    ]
    dump = {
        "apiVersion": "gpuctl.gpustack.ai/v1",
        "kind": "Dump",
        "metadata": {"name": "dump", "creationTimestamp": TAKEN},
        "source": "cluster prod-eu-1",
    }
    return {"apiVersion": "v1", "kind": "List", "items": [*objects, *events, dump]}


def text() -> str:
    return json.dumps(build(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    PATH.write_text(text())
    sys.stdout.write(f"wrote {PATH}\n")

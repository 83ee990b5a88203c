"""GPUStack's worker as a cluster shows it: the names it owns, whether it runs, the settings it was started with, and
the admission webhooks and checks it registers.

gpuctl takes none of these names where the worker runs (the companion operator reads beside it; the standalone
operator refuses to start there), reads its objects as its code writes them, and audits what it registered
(``doctor``). The facts are GPUStack's: its chart, its worker's start-up, its controllers.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpuctl.core import naming

WORKER_NAMESPACE: Final = "gpustack-system"
"""Where the chart installs the worker (its ``KUBERNETES_POD_NAMESPACE``)."""
WORKER_LEASE: Final = "worker.gpustack.ai"
"""The worker's leader-election Lease, in its namespace."""
WORKER_SELECTOR: Final = "app.kubernetes.io/part-of=gpustack-operator,app.kubernetes.io/component=operator"
"""The labels of the worker's Deployment as the chart renders it (its name is ``<release>-worker``)."""
WORKER_CONTAINER: Final = "main"
MUTATING_CONFIGURATION: Final = "gpustack-worker-mutation"
VALIDATING_CONFIGURATION: Final = "gpustack-worker-validation"
CONFIGURATIONS: Final = (MUTATING_CONFIGURATION, VALIDATING_CONFIGURATION)
"""The webhook configurations the worker writes at start, whole (every entry of its own in each)."""
JOINT_CHECK: Final = "gpustack-model-deployment-joint"
JOINT_CONTROLLER: Final = "worker.gpustack.ai/model-deployment-joint"
PARKED_MARKER: Final = "parked rather than held"
"""In the joint check's message of a Workload it deactivated after 30 minutes of waiting."""
JOINT_PARK_AFTER_SECONDS: Final = 30 * 60
JOINT_NOTHING_TO_WAIT_FOR: Final = (
    "nothing to wait for: this workload is not one replica of a multi-role model deployment"
)
"""The joint check's answer to every Workload that is not a replica of a multi-role ModelDeployment."""
MODEL_DEPLOYMENT_NAME_LABEL: Final = "model-deployment"
"""The ``app.kubernetes.io/name`` of a ModelDeployment's Pods."""
CHECKS: Final = {naming.NODE_DEVICES_CHECK: naming.NODE_DEVICES_CONTROLLER, JOINT_CHECK: JOINT_CONTROLLER}
"""The AdmissionChecks the worker applies at start, by name, with their controllers."""
ACTIVE_MESSAGES: Final = {
    naming.NODE_DEVICES_CHECK: "the node-devices admission check controller is running",
    JOINT_CHECK: "the model deployment joint admission check controller is running",
}
SETTING_DERIVED_FROM_NODE: Final = "instance-type-derived-from-node"

STANDALONE: Final = "standalone"
"""gpuctl's operator in the place of GPUStack's worker, where none runs: it serves the webhooks and writes what it
decides."""
COMPANION: Final = "companion"
"""gpuctl's operator beside GPUStack's worker: it writes nothing the worker owns, and reports where what the worker
published differs from what it decides."""
"""While on (the default), accelerated queues reference the node-devices check."""


# ----------------------------------------------------------------------------------------------- whether it runs


@dataclass(frozen=True, slots=True)
class WorkerPresence:
    """What a cluster shows of GPUStack's worker: its Lease (holder, last renewal) and its webhook configurations."""

    lease_holder: str = ""
    lease_renewed: datetime.datetime | None = None
    lease_seconds: int = 15
    configurations: tuple[str, ...] = ()
    namespace: str = WORKER_NAMESPACE

    def lease_live(self, now: datetime.datetime) -> bool:
        """A holder renewed within its lease duration (and a grace of as much again: a leader hand-over)."""
        if not self.lease_holder or self.lease_renewed is None:
            return False
        return (now - self.lease_renewed).total_seconds() <= 2 * self.lease_seconds

    def runs(self, now: datetime.datetime) -> bool:
        """Whether the worker runs, or has left its webhook configurations standing (they call it whether or not it
        runs): either way, gpuctl takes none of its names."""
        return self.lease_live(now) or bool(self.configurations)

    def evidence(self, now: datetime.datetime) -> str:
        parts = []
        if self.lease_live(now) and self.lease_renewed is not None:
            ago = max(0, int((now - self.lease_renewed).total_seconds()))
            parts.append(f"Lease {self.namespace}/{WORKER_LEASE} held by {self.lease_holder}, renewed {ago}s ago")
        if self.configurations:
            parts.append(f"webhook configurations {', '.join(self.configurations)}")
        return "; ".join(parts) or "no Lease and no webhook configuration of GPUStack's worker"


def parse_time(value: object) -> datetime.datetime | None:
    text = str(value or "")
    if not text:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def worker_presence(
    lease: Mapping[str, Any] | None, configurations: Iterable[str], namespace: str = WORKER_NAMESPACE
) -> WorkerPresence:
    """The presence record from the worker's Lease object (None when there is none) and the names of the webhook
    configurations that exist."""
    spec = lease.get("spec") if isinstance(lease, Mapping) else None
    spec = spec if isinstance(spec, Mapping) else {}
    seconds = spec.get("leaseDurationSeconds")
    return WorkerPresence(
        lease_holder=str(spec.get("holderIdentity") or ""),
        lease_renewed=parse_time(spec.get("renewTime")),
        lease_seconds=seconds if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0 else 15,
        configurations=tuple(sorted(c for c in configurations if c in CONFIGURATIONS)),
        namespace=namespace,
    )


def standalone_refusal(presence: WorkerPresence, now: datetime.datetime) -> str | None:
    """Why the standalone operator must not start here (one line), or None where GPUStack's worker does not run."""
    if not presence.runs(now):
        return None
    return (
        f"GPUStack's worker runs on this cluster ({presence.evidence(now)}): the standalone operator would take its "
        "webhooks, check and status writes; run the companion instead (--mode companion, deploy/companion)"
    )


# ----------------------------------------------------------------------------------------------- its settings


def worker_environment(deployment: Mapping[str, Any]) -> dict[str, str]:
    """The ``GPUSTACK_*`` variables set on the worker's container by value (the chart writes its manufacturer table
    there); anything set from a Secret or a ConfigMap is not read."""
    spec = deployment.get("spec") if isinstance(deployment, Mapping) else None
    template = spec.get("template") if isinstance(spec, Mapping) else None
    pod = template.get("spec") if isinstance(template, Mapping) else None
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    if not isinstance(containers, list):
        return {}
    chosen = next(
        (c for c in containers if isinstance(c, Mapping) and c.get("name") == WORKER_CONTAINER),
        containers[0] if containers and isinstance(containers[0], Mapping) else None,
    )
    env = chosen.get("env") if isinstance(chosen, Mapping) else None
    out: dict[str, str] = {}
    for e in env if isinstance(env, list) else ():
        if isinstance(e, Mapping) and isinstance(e.get("value"), str):
            name = str(e.get("name") or "")
            if name.startswith(naming.WORKER_ENV_PREFIX):
                out[name] = e["value"]
    return out


def is_worker_deployment(deployment: Mapping[str, Any]) -> bool:
    """Whether a Deployment is GPUStack's worker, by the chart's labels (and its name's ``-worker`` end)."""
    meta = deployment.get("metadata") if isinstance(deployment, Mapping) else None
    if not isinstance(meta, Mapping):
        return False
    labels = meta.get("labels")
    if not isinstance(labels, Mapping):
        return False
    wanted = dict(pair.split("=", 1) for pair in WORKER_SELECTOR.split(","))
    return all(labels.get(k) == v for k, v in wanted.items()) and str(meta.get("name") or "").endswith("-worker")


def parse_worker_env(items: Sequence[str]) -> dict[str, str]:
    """``NAME=VALUE`` settings given on a command line (``--worker-env``); raises ValueError naming a malformed one."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith(naming.WORKER_ENV_PREFIX):
            raise ValueError(
                f"--worker-env {item!r}: give one of the worker's settings as NAME=VALUE, e.g. "
                "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME=nvidia.com/gpu"
            )
        out[name] = value
    return out


# ----------------------------------------------------------------------------------------------- its webhooks


WEBHOOK_COUNTERPARTS: Final[Mapping[str, tuple[str, ...]]] = {
    "pod-accelerators.gpustack.ai": ("mutate.gpustack-worker.core.v1.pod", "validate.gpustack-worker.core.v1.pod"),
    "pod-kvcache.gpustack.ai": ("mutate.gpustack-worker-kvcache.core.v1.pod",),
    "pod-kvcache-frozen.gpustack.ai": ("validate.gpustack-worker-kvcache.core.v1.pod",),
    "workload-fit.gpustack.ai": ("mutate.gpustack-worker.kueue.x-k8s.io.v1beta2.workload",),
    "instancetype-default.gpustack.ai": ("mutate.worker.gpustack.ai.v1alpha1.instancetype",),
    "instancetype-validate.gpustack.ai": ("validate.worker.gpustack.ai.v1alpha1.instancetype",),
    "instance-default.gpustack.ai": ("mutate.worker.gpustack.ai.v1alpha1.instance",),
    "instance-validate.gpustack.ai": ("validate.worker.gpustack.ai.v1alpha1.instance",),
}
"""Each webhook of gpuctl's registry, by the entries of GPUStack's worker that do its work (the worker folds and
checks a Pod in two entries, where gpuctl's standalone operator does both in one)."""


# ----------------------------------------------------------------------------------------------- the joint check


def parked(active: bool, joint_message: str | None) -> bool:
    """A Workload the joint check parked: deactivated, its joint check's message carrying the park marker (a
    deactivation alone may be Kueue's or an admin's)."""
    return not active and joint_message is not None and PARKED_MARKER in joint_message

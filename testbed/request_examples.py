"""GPUStack's documented accepted and rejected example of each of the seven request rules, as Pods, with the expected
answer. The core's tests, the CLI's dry-run tests and the end-to-end webhook tests all run this one table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuctl.core import naming
from testbed.factories import container, pod

A10G_QUEUE = naming.queue_entrance("gpustack--nvidia-a10g-linux-amd64")
H100_QUEUE = naming.queue_entrance("gpustack--nvidia-h100-80gb-hbm3-linux-amd64")
SLICE_50 = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "50"}


@dataclass(frozen=True)
class RuleExample:
    id: str
    pod: dict[str, Any]
    allowed: bool
    message: str | None = None


def _sidecar(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return container(name, limits, restartPolicy="Always")


def _h100(limits: dict[str, str]) -> dict[str, Any]:
    return pod([container("main", limits)], queue=H100_QUEUE)


EXAMPLES: list[RuleExample] = [
    RuleExample(
        "rule1-accept", pod([container("a", {"nvidia.com/gpu": "1"}), container("b", {"nvidia.com/gpu": "1"})]), True
    ),
    RuleExample(
        "rule1-reject-families",
        pod([container("a", {"nvidia.com/gpu": "1"}), container("b", SLICE_50)]),
        False,
        "spec: Forbidden: a Pod may request only one accelerator family, found [exclusive sliced]",
    ),
    RuleExample(
        "rule1-reject-groups",
        pod(
            [container("main", {"nvidia.com/gpu": "1"})], init_containers=[container("warmup", {"nvidia.com/gpu": "1"})]
        ),
        False,
        "spec.initContainers: Forbidden: a Pod's accelerator requests must all sit in one container group; "
        "spec.initContainers must give up its request, because its devices are held for the Pod's whole life while "
        "the scheduler charges the Pod only once",
    ),
    RuleExample("rule2-accept", pod([container("main", SLICE_50)]), True),
    RuleExample(
        "rule2-reject",
        pod([container("main", {**SLICE_50, "nvidia.com/gpu.sliced": "2"})]),
        False,
        'spec.containers[0].resources.limits[nvidia.com/gpu.sliced]: Invalid value: "2": a logical slice request is '
        "always a single accelerator; multi-accelerator logical slicing is not supported yet",
    ),
    RuleExample(
        "rule3-accept", _h100({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}), True
    ),
    RuleExample(
        "rule3-reject",
        _h100({"nvidia.com/gpu.partitioned": "2", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"}),
        False,
        'spec.containers[0].resources.limits[nvidia.com/gpu.partitioned]: Invalid value: "2": a partition request is '
        "always a single accelerator; request one Pod per instance",
    ),
    RuleExample(
        "rule4-reject",
        _h100(
            {
                "nvidia.com/gpu.partitioned": "1",
                "nvidia.com/gpu.partitioned.mig-1g.10gb": "1",
                "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
            }
        ),
        False,
        "spec: Forbidden: a Pod may request only one partition profile, found [1g.10gb 3g.40gb]",
    ),
    RuleExample(
        "rule5-accept", _h100({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}), True
    ),
    RuleExample(
        "rule5-reject",
        _h100({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "2"}),
        False,
        'spec.containers[0].resources.limits[nvidia.com/gpu.partitioned.mig-3g.40gb]: Invalid value: "2": a partition '
        "profile request must be exactly 1 instance",
    ),
    RuleExample(
        "rule6-accept",
        pod([container("main", SLICE_50), container("sshd", {"device.gpustack.ai/nvidia.visibility": "1"})]),
        True,
    ),
    RuleExample(
        "rule6-reject",
        pod([container("a", SLICE_50), container("b", SLICE_50)]),
        False,
        "spec: Forbidden: at most one container may request a slicing family, found 2",
    ),
    RuleExample(
        "rule7-accept",
        pod([container("main", {"nvidia.com/gpu": "1"})], init_containers=[_sidecar("log-shipper", {"cpu": "100m"})]),
        True,
    ),
    RuleExample(
        "rule7-reject",
        pod([container("main", {"cpu": "1"})], init_containers=[_sidecar("log-shipper", {"nvidia.com/gpu": "1"})]),
        False,
        "spec.initContainers[0].resources.limits: Forbidden: a restartable init container (a native sidecar) may not "
        "request an accelerator; move the request to an app container",
    ),
]

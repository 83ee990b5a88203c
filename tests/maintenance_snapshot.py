"""Write the maintenance example snapshot (examples/maintenance): python -m tests.maintenance_snapshot.

A cluster consistent by construction (``tests.states``) for ``gpuctl plan``: an H100 pool of whole cards with a queue
of 3g.40gb requests, and an A10G pool whose node a10g-a runs Workloads a drain would evict."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.states import H100, Model, State, slice_of, whole

A10G = Model("a10g", "NVIDIA A10G", 24576)
THREE_G = {"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-3g.40gb": "1"}
PATH = Path(__file__).resolve().parents[1] / "examples" / "maintenance" / "cluster.json"


def build() -> dict[str, Any]:
    state = State()
    state.node("h100-a", 8, H100, partitioned=()).node("h100-b", 8, H100, partitioned=())
    state.hold("vllm-a", "h100-a", whole(0, 1, 2), priority=1).hold("finetune", "h100-b", whole(6, 7))
    for i in range(5):
        state.wait(f"infer-{i}", THREE_G, model=H100, created=f"2026-12-01T09:{i:02d}:00Z")
    state.node("a10g-a", 4, A10G).node("a10g-b", 4, A10G)
    state.hold("train", "a10g-a", whole(0, 1, 2), priority=1).hold("embed", "a10g-a", slice_of(3, 50))
    state.hold("batch", "a10g-b", whole(0, 1)).hold(None, "a10g-b", whole(2))
    return {"apiVersion": "v1", "kind": "List", "items": state.objects()}


def text() -> str:
    return json.dumps(build(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    out = Path(sys.argv[1]) / "cluster.json" if len(sys.argv) > 1 else PATH
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text())

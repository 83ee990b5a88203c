"""What every plan is made of: the objects a step waits on or evicts (:class:`Holder`), the step itself, proven by
simulation (:class:`Step`), and the words for a Workload the simulation holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuctl.core.errors import InputError
from gpuctl.core.simulate import Outcome

WORKLOAD_API = "kueue.x-k8s.io/v1beta2"
INSTANCE_API = "worker.gpustack.ai/v1alpha1"


class PlanError(InputError, ValueError):
    """A plan that cannot be asked as given (an unknown node, a pool without queue, a demand that cannot be read)."""


@dataclass(frozen=True, slots=True)
class Holder:
    """An object that must finish (or move) before a card switches, or that a drain evicts."""

    kind: str
    namespace: str
    name: str
    cards: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        api = {"Workload": WORKLOAD_API, "Pod": "v1", "Instance": INSTANCE_API}[self.kind]
        return {"apiVersion": api, "kind": self.kind, "namespace": self.namespace, "name": self.name} | (
            {"cards": list(self.cards)} if self.cards else {}
        )


@dataclass(frozen=True, slots=True)
class Step:
    """One node's switch in a plan (or one node's drain), proven by the simulation of every step up to it."""

    step: int
    pool: str
    node: str
    cards: tuple[str, ...]
    to: str
    blocked_by: tuple[Holder, ...]
    views_before: tuple[dict[str, Any], ...]
    views_after: tuple[dict[str, Any], ...]
    admits: tuple[str, ...]
    """The demand (``namespace/name``) this step admits beyond the steps before it."""
    displaces: tuple[str, ...] = ()
    """Demand admitted after the step before that this one's layout no longer admits (a later step admits it
    again: the plan as a whole never takes what is admitted already)."""
    detail: tuple[dict[str, Any], ...] = ()
    """Per card: its mode and holders before, its mode and free profiles after (``-o wide``)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "pool": self.pool,
            "node": self.node,
            "cards": list(self.cards),
            "to": self.to,
            "blockedBy": [h.to_dict() for h in self.blocked_by],
            "viewsBefore": list(self.views_before),
            "viewsAfter": list(self.views_after),
            "admits": [workload_ref(k) for k in self.admits],
            "displaces": [workload_ref(k) for k in self.displaces],
            "proven": True,
            "cardDetail": list(self.detail),
            **self.extra,
        }


def workload_ref(key: str) -> dict[str, str]:
    """A Workload's ``namespace/name`` as a Kubernetes object reference."""
    ns, _, name = key.partition("/")
    return {"apiVersion": WORKLOAD_API, "kind": "Workload", "namespace": ns, "name": name}


def held_why(o: Outcome) -> str:
    """Why the simulation holds a Workload: the gate and its summary (the Pod webhook's own words at gate 1)."""
    e = o.explanation
    g = e.gates[(e.held_by or 1) - 1]
    why = f"held at gate {g.gate} ({g.name}): {g.summary}"
    return f"{why}: {g.evidence[-1]}" if g.gate == 1 and g.evidence else why  # the webhook's own words

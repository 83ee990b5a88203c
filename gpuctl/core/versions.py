"""Which Kubernetes and Kueue a cluster runs, where that was read, and what of Kueue's behaviour follows from it.

gpuctl reproduces Kueue's decisions, and Kueue decides some things differently by version. The one that changes
answers: how Topology-Aware Scheduling counts what an admitted Workload occupies on its node. Up to 0.17 it charges
the Workload's quota usage (accelerator keys already folded into credits), so cards held by Pods outside Kueue and
cards promised to admitted Workloads are counted in two different units and the node never looks full; from 0.18 it
charges the raw requests of the PodSet's template, on every flavor whose topology ends at the node.

A version is read, never guessed: from the Kueue manager's image, a snapshot's record, the flag the user gives, or the
fields Kueue's CRDs serve. When none says, the answer is computed for the newest tested behaviour and says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

Version = tuple[int, int, int]

TESTED_KUBERNETES: Final[tuple[Version, Version]] = ((1, 35, 0), (1, 37, 99))
"""The Kubernetes minors gpuctl is tested on (floor 1.35, primary 1.36, edge 1.37)."""
TESTED_KUEUE: Final[tuple[Version, Version]] = ((0, 17, 0), (0, 20, 99))
"""The Kueue minors gpuctl is tested on: 0.17 and 0.19 on a real control plane, 0.20's API surface by its CRDs."""
TAS_RAW_USAGE: Final[Version] = (0, 18, 0)
"""From this Kueue, TAS charges an admitted Workload's raw template requests to its node, across flavors."""
PENDING_TOKENS: Final[Version] = (0, 19, 0)
"""From this Kueue, the pending reasons of QuotaReserved and Admitted may be tokens (where its gate is on)."""

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> Version | None:
    """``v0.19.2``, ``0.19``, ``v1.36.3-gke.1`` → ``(0, 19, 2)``, ``(0, 19, 0)``, ``(1, 36, 3)``; None otherwise."""
    found = _VERSION.search(text or "")
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2)), int(found.group(3) or 0)


def image_version(image: str) -> Version | None:
    """The version in an image reference's tag (``registry/kueue/kueue:v0.19.2``); None for a digest or no tag."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    return parse_version(last.rsplit(":", 1)[1])


def version_text(version: Version | None) -> str:
    return "unknown" if version is None else f"v{version[0]}.{version[1]}.{version[2]}"


def _tested(version: Version, bounds: tuple[Version, Version]) -> bool:
    return bounds[0][:2] <= version[:2] <= bounds[1][:2]


def tested_range(bounds: tuple[Version, Version]) -> str:
    low, high = bounds
    return f"{low[0]}.{low[1]}–{high[0]}.{high[1]}"


@dataclass(frozen=True, slots=True)
class KueueVersion:
    """Kueue's version as read, and from where (``source`` names it, e.g. ``deployment kueue-system/…``)."""

    version: Version | None
    source: str = ""

    @property
    def known(self) -> bool:
        return self.version is not None

    @property
    def text(self) -> str:
        return version_text(self.version)

    @property
    def tas_charges_raw_requests(self) -> bool:
        """TAS charges an admitted Workload's raw template requests (0.18+, and when unknown: the newest tested)."""
        return self.version is None or self.version >= TAS_RAW_USAGE

    @property
    def tested(self) -> bool | None:
        return None if self.version is None else _tested(self.version, TESTED_KUEUE)

    def describe(self) -> str:
        """One line for an answer: which Kueue's decisions it reproduces, and on what ground."""
        if self.version is None:
            return (
                "as Kueue 0.18 and later decide: its version is not known here (no manager image or snapshot record; "
                "--kueue-version names it)"
            )
        return (
            f"as Kueue {self.text} decides (read from {self.source})"
            if self.source
            else f"as Kueue {self.text} decides"
        )

    def to_dict(self) -> dict[str, object]:
        return {"version": self.text if self.known else None, "source": self.source or None}


UNKNOWN_KUEUE: Final = KueueVersion(None, "")

_PODSETS_BY_MINOR: Final[Mapping[int, Version]] = {8: (0, 17, 0), 10: (0, 18, 0), 18: (0, 19, 0)}
"""How many PodSets Kueue's v1beta2 Workload may hold, by the minor that set the bound (8 up to 0.17)."""


def kueue_from_schema(max_podsets: int | None, v1beta1_served: bool | None) -> Version | None:
    """The oldest Kueue whose Workload CRD looks like this (a minor, patch 0): v1beta1 no longer served from 0.20,
    the PodSet bound 8 → 10 → 18 over 0.17, 0.18, 0.19. None where the schema says neither."""
    if v1beta1_served is False:
        return (0, 20, 0)
    if max_podsets is None:
        return None
    return _PODSETS_BY_MINOR.get(max_podsets)


def kubernetes_tested(version: Version | None) -> bool | None:
    return None if version is None else _tested(version, TESTED_KUBERNETES)

"""The tested control planes: which Kubernetes, etcd and Kueue each one runs, read from ``hack/cluster/matrix``.

A control plane is chosen by name (``GPUCTL_CLUSTER=floor|primary|edge|...``) or by versions (``GPUCTL_K8S``,
``GPUCTL_KUEUE``), as ``hack/cluster/build.sh`` chooses it; the default is ``primary``. The settings column of the
matrix names what a combination turns on beyond the suite's own configuration:

- ``workload-aware-scheduling``: the API server serves the core ``scheduling.k8s.io`` Workload (Kubernetes 1.37+);
- ``kueue-v1beta2-only``: Kueue's CRDs serve only ``kueue.x-k8s.io/v1beta2``, as Kueue 0.20 ships them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MATRIX = Path(__file__).resolve().parents[1] / "hack" / "cluster" / "matrix"
DEFAULT = "primary"

WORKLOAD_AWARE_SCHEDULING = "workload-aware-scheduling"
KUEUE_V1BETA2_ONLY = "kueue-v1beta2-only"


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.lstrip("v").split(".")[:2]
    return int(major), int(minor)


@dataclass(frozen=True)
class ClusterVersions:
    name: str
    kubernetes: str
    etcd: str
    kueue: str
    settings: frozenset[str]

    @property
    def kubernetes_minor(self) -> tuple[int, int]:
        return _minor(self.kubernetes)

    @property
    def kueue_minor(self) -> tuple[int, int]:
        return _minor(self.kueue)

    @property
    def kueue_serves_v1beta1(self) -> bool:
        return KUEUE_V1BETA2_ONLY not in self.settings

    @property
    def workload_aware_scheduling(self) -> bool:
        return WORKLOAD_AWARE_SCHEDULING in self.settings

    def describe(self) -> str:
        extra = f" ({', '.join(sorted(self.settings))})" if self.settings else ""
        return f"{self.name}: Kubernetes {self.kubernetes}, etcd {self.etcd}, Kueue {self.kueue}{extra}"


def matrix(path: Path = MATRIX) -> list[ClusterVersions]:
    rows: list[ClusterVersions] = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        name, kubernetes, etcd, kueue = fields[:4]
        extras = fields[4] if len(fields) > 4 else "-"
        settings = frozenset(s for s in extras.split(",") if s and s != "-")
        rows.append(ClusterVersions(name, kubernetes, etcd, kueue, settings))
    return rows


def chosen(environ: os._Environ[str] | dict[str, str] | None = None) -> ClusterVersions:
    """The combination the environment names (as build.sh reads it); ``LookupError`` naming the choices if none."""
    env = os.environ if environ is None else environ
    name = env.get("GPUCTL_CLUSTER", "")
    k8s = env.get("GPUCTL_K8S", "").lstrip("v")
    kueue = env.get("GPUCTL_KUEUE", "").lstrip("v")
    if not (name or k8s or kueue):
        name = DEFAULT
    rows = matrix()
    for row in rows:
        if name and row.name != name:
            continue
        if k8s and row.kubernetes != f"v{k8s}":
            continue
        if kueue and row.kueue != f"v{kueue}":
            continue
        return row
    choices = ", ".join(f"{r.name} ({r.kubernetes} + Kueue {r.kueue})" for r in rows)
    raise LookupError(f"no tested control plane matches {name or k8s or kueue!r}; choose one of: {choices}")

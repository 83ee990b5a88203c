"""Kueue's Concurrent Admission families: a parent Workload and one Variant Workload per flavor.

With the ``ConcurrentAdmission`` gate on, a ClusterQueue with a ``concurrentAdmissionPolicy`` makes, for each parent
Workload a job creates, one Variant per flavor (a Workload controlled by the parent, allowed that one flavor). The
Variants hold quota, are placed by TAS and pass the admission checks; the parent never enters Kueue's scheduler and
copies the admitted Variant's admission, which is what starts the job. Its Pods carry the parent's name.

So a family is counted once: where a parent's Variants are read, the parent's copied status is left out of every
count (:func:`judged`, as the check and the quota book read them), and a listing shows one line per family under
the parent's name, the Variant that holds quota standing for it (:func:`folded`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from gpuctl.core.workloads import Workload


def _families(workloads: Sequence[Workload]) -> Mapping[tuple[str, str], list[Workload]]:
    out: dict[tuple[str, str], list[Workload]] = {}
    for w in workloads:
        if w.variant_of and not w.variant_name:  # a folded family stands for itself
            out.setdefault((w.namespace, w.variant_of), []).append(w)
    return out


def judged(workloads: Iterable[Workload]) -> list[Workload]:
    """Every Workload as Kueue counts it: a parent whose Variants are read is left out (its status is a copy of the
    admitted Variant's, and its Pods are matched to that Variant by its name)."""
    listed = list(workloads)
    families = _families(listed)
    if not families:
        return listed
    return [w for w in listed if (w.namespace, w.name) not in families]


def standing(variants: Sequence[Workload]) -> Workload:
    """The Variant that stands for its family: the one that holds quota (admitted first), else an active one, else
    the first by name."""
    ordered = sorted(variants, key=lambda v: v.name)
    found = (
        next((v for v in ordered if v.admitted), None)
        or next((v for v in ordered if v.quota_reserved and not v.finished), None)
        or next((v for v in ordered if v.active and not v.finished), None)
    )
    return found or ordered[0]


def folded(workloads: Iterable[Workload]) -> list[Workload]:
    """One Workload per family, for listings and explanations: the standing Variant under its parent's name (its
    own name kept in ``variant_name``); every other Workload as it is."""
    listed = list(workloads)
    families = _families(listed)
    if not families:
        return listed
    parents = {(w.namespace, w.name): w for w in listed if (w.namespace, w.name) in families}
    out = []
    for w in listed:
        family = (w.namespace, w.variant_of)
        if (w.namespace, w.name) in families:
            continue
        if w.variant_of:
            variants = families[family]
            stand = standing(variants)
            if w is not stand:
                continue
            parent = parents.get(family)
            out.append(
                replace(
                    w,
                    name=w.variant_of,
                    variant_name=w.name,
                    variants=len(variants),
                    created=parent.created if parent is not None else w.created,
                    labels=parent.labels if parent is not None else w.labels,
                )
            )
            continue
        out.append(w)
    return sorted(out, key=lambda w: w.key)

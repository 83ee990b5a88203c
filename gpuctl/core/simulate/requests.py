"""A Pod shape's requests, four ways (raw, with a ``pods`` slot, as Kueue's quota counts them, as TAS charges them), computed once per shape."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpuctl.core.credits import pod_requests
from gpuctl.core.quota import quota_requests
from gpuctl.core.tas import Amount, plain, with_pod_slot


def _resources_key(spec: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What a Pod's effective requests depend on, as a hashable key (None when a value is not plain text)."""
    key: list[Any] = []
    for section in ("initContainers", "containers"):
        for c in spec.get(section) or []:
            if not isinstance(c, Mapping):
                return None
            res = c.get("resources")
            parts: list[Any] = [section, c.get("restartPolicy")]
            for part in ("limits", "requests"):
                values = res.get(part) if isinstance(res, Mapping) else None
                if values is None:
                    parts.append(None)
                    continue
                if not isinstance(values, Mapping):
                    return None
                parts.append(tuple(sorted((str(k), str(v)) for k, v in values.items())))
            key.append(tuple(parts))
    return tuple(key)


@dataclass(frozen=True, slots=True)
class PodRequests:
    """One Pod shape's requests: raw (as the scheduler counts them), with a ``pods`` slot (as TAS places a Pod), as
    Kueue's quota counts them (accelerator keys folded into credits), and as TAS charges an admitted Workload's Pod
    to its node (its quota usage and a ``pods`` slot: raw accelerator keys are not among them)."""

    raw: Mapping[str, Fraction]
    slot: Mapping[str, Amount]
    quota: Mapping[str, Amount]
    charge: Mapping[str, Amount]


_REQUESTS_MEMO: dict[tuple[Any, ...], PodRequests] = {}


def requests_of(spec: Mapping[str, Any]) -> PodRequests:
    """A Pod spec's requests; thousands of Workloads share a few shapes, so each shape is computed once."""
    key = _resources_key(spec)
    got = _REQUESTS_MEMO.get(key) if key is not None else None
    if got is None:
        raw = pod_requests(spec)
        quota = plain(quota_requests(spec))
        got = PodRequests(raw, with_pod_slot(raw), quota, with_pod_slot(quota))
        if key is not None and len(_REQUESTS_MEMO) < 4096:
            _REQUESTS_MEMO[key] = got
    return got


def quota_of(spec: Mapping[str, Any]) -> Mapping[str, Amount]:
    return requests_of(spec).quota


class RequestsBySpec:
    """Requests per Pod spec object: the records are immutable and kept alive by the state, so their identity is a
    key that costs nothing to compute."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Mapping[str, Any], PodRequests]] = {}

    def __call__(self, spec: Mapping[str, Any]) -> PodRequests:
        got = self._by_id.get(id(spec))
        if got is None or got[0] is not spec:
            got = (spec, requests_of(spec))
            self._by_id[id(spec)] = got
        return got[1]


def add_times(into: dict[str, Amount], amounts: Mapping[str, Amount], times: int) -> None:
    for k, v in amounts.items():
        into[k] = into.get(k, 0) + v * times

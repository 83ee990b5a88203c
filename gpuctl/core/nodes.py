"""Node records: what the gates read of a Node (labels, allocatable, readiness)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from sys import intern
from typing import Any

from gpuctl.core.units import QuantityError, parse_quantity


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, Fraction | int]
    """Whole amounts are ints (cheap arithmetic when thousands of nodes are compared), the rest Fractions."""
    capacity: Mapping[str, Fraction | int]
    """Only what is read of it: ``cpu``, the fallback of :attr:`cpu_cores`."""
    ready: bool
    unschedulable: bool

    @property
    def cpu_cores(self) -> int:
        """Whole cores the node offers (allocatable, falling back to capacity)."""
        return int(self.allocatable.get("cpu", self.capacity.get("cpu", Fraction(0))))


def _m(value: Any) -> Mapping[str, Any]:
    return value if type(value) is dict or isinstance(value, Mapping) else {}  # dicts first: the ABC check is slow


def _l(value: Any) -> list[Any]:
    return value if type(value) is list else []


_AMOUNTS: dict[str, Fraction | int] = {}
"""Amounts by their text: the Nodes of a pool repeat a few spellings (``110``, ``512Gi``) thousands of times."""


def _amount(value: Any) -> Fraction | int:
    """A quantity as an int when whole; raises QuantityError."""
    if type(value) is str:
        got = _AMOUNTS.get(value)
        if got is not None:
            return got
    q = parse_quantity(value)
    amount = q.numerator if q.denominator == 1 else q
    if type(value) is str and len(_AMOUNTS) < 8192:
        _AMOUNTS[value] = amount
    return amount


def _quantities(raw: Any) -> dict[str, Fraction | int]:
    out: dict[str, Fraction | int] = {}
    for k, v in _m(raw).items():
        try:
            out[intern(str(k))] = _amount(v)
        except QuantityError:
            continue
    return out


_ALLOCATABLE: dict[tuple[tuple[str, str], ...], Mapping[str, Fraction | int]] = {}
"""Allocatable maps by their text: the Nodes of a pool share a few (records are read-only, so one map serves all)."""


def _allocatable(raw: Any) -> Mapping[str, Fraction | int]:
    if type(raw) is not dict or len(raw) > 64 or not all(type(v) is str for v in raw.values()):
        return _quantities(raw)  # only maps of text are shared (1 and True are equal keys, not equal quantities)
    key = tuple(raw.items())
    got = _ALLOCATABLE.get(key)
    if got is None:
        got = _quantities(raw)
        if len(_ALLOCATABLE) < 4096:
            _ALLOCATABLE[key] = got
    return got


def parse_node(obj: Mapping[str, Any]) -> Node:
    meta = _m(obj.get("metadata"))
    status = _m(obj.get("status"))
    capacity = _m(status.get("capacity"))
    ready = any(_m(c).get("type") == "Ready" and _m(c).get("status") == "True" for c in _l(status.get("conditions")))
    return Node(
        name=str(meta.get("name", "")),
        labels={intern(str(k)): intern(str(v)) for k, v in _m(meta.get("labels")).items()},
        allocatable=_allocatable(status.get("allocatable")),
        capacity=_quantities({"cpu": capacity["cpu"]}) if "cpu" in capacity else {},
        ready=ready,
        unschedulable=bool(_m(obj.get("spec")).get("unschedulable", False)),
    )

"""Label selectors in kubectl's syntax: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``, ``a notin (x)``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpuctl.cluster.errors import SelectorError

_SET = re.compile(r"^([^\s!=(),]+)\s+(in|notin)\s+\(([^()]*)\)$")
_KEY = re.compile(r"^[^\s!=(),]+$")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str
    """One of ``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!exists``."""
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op in ("=", "in"):
            return value in self.values
        return value not in self.values


def _split(selector: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in selector:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_selector(selector: str) -> list[Requirement]:
    """Requirements of a label selector; SelectorError names the part that cannot be read."""
    reqs: list[Requirement] = []
    for part in _split(selector):
        m = _SET.match(part)
        if m:
            values = frozenset(v.strip() for v in m[3].split(",") if v.strip())
            reqs.append(Requirement(m[1], m[2], values))
            continue
        op = next((o for o in ("!=", "==", "=") if o in part), None)
        if op is not None:
            key, _, value = (s.strip() for s in part.partition(op))
            if not _KEY.match(key) or any(c in value for c in "=!() "):
                raise SelectorError(f"label selector {selector!r}: cannot read {part!r}")
            reqs.append(Requirement(key, "!=" if op == "!=" else "=", frozenset({value})))
        elif part.startswith("!") and _KEY.match(part[1:].strip()):
            reqs.append(Requirement(part[1:].strip(), "!exists"))
        elif _KEY.match(part):
            reqs.append(Requirement(part, "exists"))
        else:
            raise SelectorError(f"label selector {selector!r}: cannot read {part!r}")
    return reqs


def matches_selector(labels: Mapping[str, str], selector: str) -> bool:
    return all(req.matches(labels) for req in parse_selector(selector))

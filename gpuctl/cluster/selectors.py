"""Label and field selectors as the API server reads them, for the objects a snapshot holds (a live read sends them
to the server instead).

Label selectors: requirements joined by ``,`` — ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``
(has the label), ``!a`` (lacks it), ``a>3`` and ``a<3`` (an integer value); keys and values are checked as the server
checks them. ``!=`` and ``notin`` also match an object without the label.

Field selectors: ``field=value``, ``field==value`` or ``field!=value`` joined by ``,`` (``\\,``, ``\\=`` and ``\\\\``
escape), on the fields the server can select for that kind: ``metadata.name`` for every kind, ``metadata.namespace``
for a namespaced one, and a few more for Pods and Nodes. Any other field is refused with the server's own words,
``field label not supported: spec.x``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.cluster.errors import SelectorError
from gpuctl.cluster.kinds import NAMESPACE, NODE, POD, Kind

_SPECIAL = frozenset("!=,()<>")
_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement of a label selector."""

    key: str
    op: str
    """One of ``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!exists``, ``>``, ``<``."""
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return value is not None and value in self.values
        if self.op in ("!=", "notin"):
            return value is None or value not in self.values
        try:
            have, bound = int(value or ""), int(self.values[0])
        except ValueError:
            return False
        return have > bound if self.op == ">" else have < bound


def _tokens(text: str) -> list[str]:
    """The lexer's tokens: runs of ``!=``-like operators, ``,``, ``(``, ``)`` and identifiers."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "(),":
            out.append(ch)
            i += 1
        elif ch in "!=<>":
            for op in ("==", "!=", "=", "!", "<", ">"):
                if text.startswith(op, i):
                    out.append(op)
                    i += len(op)
                    break
        else:
            start = i
            while i < len(text) and not text[i].isspace() and text[i] not in _SPECIAL:
                i += 1
            out.append(text[start:i])
    return out


def _check_key(selector: str, key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    ok = bool(name) and len(name) <= 63 and bool(_NAME.match(name))
    if slash:
        ok = ok and bool(prefix) and len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.match(prefix))
    if not ok:
        raise SelectorError(
            f"label selector {selector!r}: {key!r} is not a label key (a name of up to 63 letters, digits, '-', '_' "
            "or '.', optionally prefixed by a DNS subdomain and '/')"
        )


def _check_value(selector: str, value: str) -> None:
    if len(value) > 63 or not _NAME.match(value):
        raise SelectorError(
            f"label selector {selector!r}: {value!r} is not a label value (up to 63 letters, digits, '-', '_' or "
            "'.', beginning and ending with a letter or digit)"
        )


def parse_selector(selector: str) -> tuple[Requirement, ...]:
    """The requirements of a label selector; a SelectorError names the part that cannot be read and why."""
    tokens = _tokens(selector)
    reqs: list[Requirement] = []
    i = 0

    def fail(why: str) -> SelectorError:
        return SelectorError(f"label selector {selector!r}: {why}")

    def take() -> str | None:
        nonlocal i
        token = tokens[i] if i < len(tokens) else None
        i += 1
        return token

    while i < len(tokens):
        token = take()
        if token == "!":
            key = take()
            if key is None or key in _SPECIAL or key in ("(", ")", ","):
                raise fail("'!' must be followed by a label key")
            _check_key(selector, key)
            reqs.append(Requirement(key, "!exists"))
        elif token is None or token in ("(", ")", ",", "=", "==", "!=", "<", ">"):
            raise fail(f"found {token!r}, expected a label key")
        else:
            key = token
            _check_key(selector, key)
            op = tokens[i] if i < len(tokens) else ","
            if op == ",":
                reqs.append(Requirement(key, "exists"))
            elif op in ("=", "==", "!="):
                i += 1
                value = tokens[i] if i < len(tokens) and tokens[i] not in ("(", ")", ",", "!", "=", "==", "!=") else ""
                if value:
                    i += 1
                _check_value(selector, value)
                reqs.append(Requirement(key, "!=" if op == "!=" else "=", (value,)))
            elif op in ("in", "notin"):
                i += 1
                if take() != "(":
                    raise fail(f"'{op}' must be followed by a parenthesised list of values, as in {key} {op} (a,b)")
                values: list[str] = []
                expect_value = True
                while True:
                    token = take()
                    if token is None:
                        raise fail("a ')' is missing")
                    if token == ")":
                        if expect_value and values:
                            values.append("")
                        break
                    if token == ",":
                        if expect_value:
                            values.append("")
                        expect_value = True
                        continue
                    if not expect_value or token in _SPECIAL:
                        raise fail(f"found {token!r} in the values of {key}; separate them with ','")
                    _check_value(selector, token)
                    values.append(token)
                    expect_value = False
                reqs.append(Requirement(key, op, tuple(values)))
            elif op in ("<", ">"):
                i += 1
                bound = take()
                if bound is None or not re.fullmatch(r"-?\d+", bound):
                    raise fail(f"'{op}' compares with a whole number, as in {key}{op}3")
                reqs.append(Requirement(key, op, (bound,)))
            else:
                raise fail(f"found {op!r}, expected one of in, notin, =, ==, !=, >, <")
        if i < len(tokens):
            if tokens[i] != ",":
                raise fail(f"found {tokens[i]!r}, expected ',' between requirements")
            i += 1
            if i == len(tokens):
                raise fail("a requirement must follow ','")
    return tuple(reqs)


# ----------------------------------------------------------------------------------------------- fields


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    op: str
    """``=`` or ``!=``."""
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        return (fields.get(self.field, "") == self.value) == (self.op == "=")


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, i = [], "", 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            current += text[i : i + 2]
            i += 2
            continue
        if text[i] == sep:
            parts.append(current)
            current = ""
        else:
            current += text[i]
        i += 1
    parts.append(current)
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_field_selector(selector: str) -> tuple[FieldRequirement, ...]:
    """The terms of a field selector; a SelectorError names the term that cannot be read."""
    reqs = []
    for term in _split_unescaped(selector, ","):
        if not term:
            continue
        m = re.match(r"^((?:[^\\=!]|\\.)+?)(==|!=|=)(.*)$", term)
        if m is None or not m[1].strip():
            raise SelectorError(
                f"field selector {selector!r}: cannot read {term!r}; use field=value, field==value or field!=value"
            )
        reqs.append(FieldRequirement(_unescape(m[1].strip()), "!=" if m[2] == "!=" else "=", _unescape(m[3])))
    return tuple(reqs)


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def selectable_fields(kind: Kind, obj: Mapping[str, Any]) -> dict[str, str]:
    """The fields the API server can select ``obj`` by, with the values it gives them."""
    fields = {"metadata.name": str(_get(obj, "metadata", "name") or "")}
    if kind.namespaced:
        fields["metadata.namespace"] = str(_get(obj, "metadata", "namespace") or "")
    if kind == POD:
        ips = _get(obj, "status", "podIPs") or []
        first = ips[0].get("ip") if ips and isinstance(ips[0], Mapping) else None
        fields.update(
            {
                "spec.nodeName": str(_get(obj, "spec", "nodeName") or ""),
                "spec.restartPolicy": str(_get(obj, "spec", "restartPolicy") or ""),
                "spec.schedulerName": str(_get(obj, "spec", "schedulerName") or ""),
                "spec.serviceAccountName": str(_get(obj, "spec", "serviceAccountName") or ""),
                "spec.hostNetwork": "true" if _get(obj, "spec", "hostNetwork") is True else "false",
                "status.phase": str(_get(obj, "status", "phase") or ""),
                "status.podIP": str(first or _get(obj, "status", "podIP") or ""),
                "status.nominatedNodeName": str(_get(obj, "status", "nominatedNodeName") or ""),
            }
        )
    elif kind == NODE:
        fields["spec.unschedulable"] = "true" if _get(obj, "spec", "unschedulable") is True else "false"
    elif kind == NAMESPACE:
        fields["status.phase"] = str(_get(obj, "status", "phase") or "")
    return fields


SUPPORTED_EXTRA = {
    POD.kind: ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
               "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs", "status.nominatedNodeName"),
    NODE.kind: ("spec.unschedulable",),
    NAMESPACE.kind: ("status.phase",),
}  # fmt: skip
"""Fields beyond ``metadata.name`` (and a namespaced kind's ``metadata.namespace``) the server selects by."""


def supported_fields(kind: Kind) -> tuple[str, ...]:
    return ("metadata.name", *(("metadata.namespace",) if kind.namespaced else ()), *SUPPORTED_EXTRA.get(kind.kind, ()))


@dataclass(frozen=True, slots=True)
class Selection:
    """A label and a field selector for one kind, read and checked once."""

    kind: Kind
    labels: tuple[Requirement, ...] = ()
    fields: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if self.labels:
            labels = _get(obj, "metadata", "labels") or {}
            if not all(r.matches(labels) for r in self.labels):
                return False
        if self.fields:
            values = selectable_fields(self.kind, obj)
            return all(r.matches(values) for r in self.fields)
        return True


def selection(kind: Kind, label_selector: str | None = None, field_selector: str | None = None) -> Selection:
    """The selectors for ``kind``; a field the server cannot select this kind by is refused in its own words."""
    fields = parse_field_selector(field_selector) if field_selector else ()
    supported = supported_fields(kind)
    for f in fields:
        if f.field not in supported:
            raise SelectorError(
                f"field label not supported: {f.field} ({kind.plural} select by {', '.join(supported)})"
            )
    return Selection(kind, parse_selector(label_selector) if label_selector else (), fields)

"""kubectl's JSONPath templates (``-o jsonpath=…``, ``--sort-by``, ``-o custom-columns=…``).

Supported, as kubectl reads them: ``{.a.b}``, ``{['a']}``, ``{.a[0]}``, ``{.a[-1]}``, ``{.a[1:3]}``, ``{.a[*]}``,
recursive descent ``{..name}``, unions ``{.a['b','c']}``, filters ``{.items[?(@.x=="y")]}`` (``==``, ``!=``, ``<``,
``<=``, ``>``, ``>=``, or a bare path for "exists"), ``{range .items[*]}…{end}``, string literals ``{"\\n"}``, ``@``
(the current object) and ``$`` (the root). Several results print space-separated; strings print as they are, other
values as JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


class JSONPathError(ValueError):
    """A template that cannot be parsed or applied; the message names the problem."""


# ----------------------------------------------------------------------------------------------- paths

_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class _Field:
    names: tuple[str, ...]  # several for a union; "*" for a wildcard


@dataclass(frozen=True, slots=True)
class _Index:
    indexes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Slice:
    start: int | None
    stop: int | None
    step: int | None


@dataclass(frozen=True, slots=True)
class _Recursive:
    name: str


@dataclass(frozen=True, slots=True)
class _Filter:
    left: tuple[Any, ...]
    op: str
    right: Any


Step = _Field | _Index | _Slice | _Recursive | _Filter
_NAME = re.compile(r"[A-Za-z0-9_\-/$]+")
_OPS = ("==", "!=", "<=", ">=", "<", ">")


def _literal(text: str) -> Any:
    text = text.strip()
    if (text.startswith("'") and text.endswith("'")) or (text.startswith('"') and text.endswith('"')):
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_path(expr: str) -> tuple[Step, ...]:
    """``.items[*].metadata.name`` → steps (a leading ``$`` or ``@`` is the root or current object)."""
    expr = expr.strip()
    if expr.startswith(("$", "@")):
        expr = expr[1:]
    steps: list[Step] = []
    i = 0
    while i < len(expr):
        if expr.startswith("..", i):
            match = _NAME.match(expr, i + 2) or (re.compile(r"\*").match(expr, i + 2))
            if not match:
                raise JSONPathError(f"{expr!r}: a name must follow '..'")
            steps.append(_Recursive(match.group()))
            i = match.end()
        elif expr[i] == ".":
            if i + 1 < len(expr) and expr[i + 1] == "*":
                steps.append(_Field(("*",)))
                i += 2
                continue
            match = _NAME.match(expr, i + 1)
            if not match:
                if i + 1 == len(expr):
                    i += 1
                    continue
                raise JSONPathError(f"{expr!r}: a field name must follow '.' at position {i}")
            steps.append(_Field((match.group(),)))
            i = match.end()
        elif expr[i] == "[":
            end = _closing(expr, i)
            steps.append(_bracket(expr[i + 1 : end], expr))
            i = end + 1
        else:
            raise JSONPathError(f"{expr!r}: unexpected {expr[i]!r} at position {i}")
    return tuple(steps)


def _closing(expr: str, start: int) -> int:
    depth, quote = 0, ""
    for i in range(start, len(expr)):
        ch = expr[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return i
    raise JSONPathError(f"{expr!r}: unclosed '['")


def _bracket(inner: str, expr: str) -> Step:
    inner = inner.strip()
    if inner == "*":
        return _Field(("*",))
    if inner.startswith("?(") and inner.endswith(")"):
        body = inner[2:-1].strip()
        for op in _OPS:
            left, sep, right = body.partition(op)
            if sep:
                return _Filter(parse_path(left), op, _literal(right))
        return _Filter(parse_path(body), "exists", None)
    if ":" in inner:
        parts = [p.strip() for p in inner.split(":")]
        if len(parts) > 3:
            raise JSONPathError(f"{expr!r}: a slice has at most start:stop:step")
        try:
            numbers = [int(p) if p else None for p in parts] + [None] * (3 - len(parts))
        except ValueError:
            raise JSONPathError(f"{expr!r}: slice bounds must be integers") from None
        return _Slice(numbers[0], numbers[1], numbers[2])
    parts = [p.strip() for p in inner.split(",")]
    if all(re.fullmatch(r"-?\d+", p) for p in parts):
        return _Index(tuple(int(p) for p in parts))
    names = []
    for p in parts:
        if len(p) >= 2 and p[0] == p[-1] and p[0] in "'\"":
            names.append(p[1:-1])
        else:
            raise JSONPathError(f"{expr!r}: [{inner}] is neither an index, a slice, a filter nor a quoted name")
    return _Field(tuple(names))


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    return []


def _descend(value: Any) -> Iterator[Any]:
    yield value
    for child in _children(value):
        yield from _descend(child)


def _compare(left: Any, op: str, right: Any) -> bool:
    if op == "exists":
        return left is not _MISSING
    if left is _MISSING:
        return False
    if op == "==":
        return bool(left == right or str(left) == str(right))
    if op == "!=":
        return not (left == right or str(left) == str(right))
    try:
        return bool({"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op])
    except TypeError:
        return False


def apply(steps: tuple[Step, ...], value: Any) -> list[Any]:
    """Every value the steps reach from ``value`` (an empty list when none)."""
    current = [value]
    for step in steps:
        found: list[Any] = []
        for v in current:
            if isinstance(step, _Field):
                if step.names == ("*",):
                    found.extend(_children(v))
                elif isinstance(v, dict):
                    found.extend(v[n] for n in step.names if n in v)
            elif isinstance(step, _Index):
                if isinstance(v, list):
                    found.extend(v[i] for i in step.indexes if -len(v) <= i < len(v))
            elif isinstance(step, _Slice):
                if isinstance(v, list):
                    found.extend(v[step.start : step.stop : step.step])
            elif isinstance(step, _Recursive):
                for node in _descend(v):
                    if step.name == "*":
                        found.extend(_children(node))
                    elif isinstance(node, dict) and step.name in node:
                        found.append(node[step.name])
            else:
                for item in v if isinstance(v, list) else _children(v):
                    left = apply(step.left, item)
                    if _compare(left[0] if left else _MISSING, step.op, step.right):
                        found.append(item)
        current = found
    return current


def value_at(expr: str, obj: Any) -> Any:
    """The first value an expression (with or without braces) reaches, or None (``--sort-by``, custom columns)."""
    expr = expr.strip()
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    found = apply(parse_path(expr), obj)
    return found[0] if found else None


# ----------------------------------------------------------------------------------------------- templates


@dataclass(frozen=True, slots=True)
class _Text:
    text: str


@dataclass(frozen=True, slots=True)
class _Expr:
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class _Range:
    steps: tuple[Step, ...]
    body: tuple[Any, ...]


def _segments(template: str) -> Iterator[tuple[str, str]]:
    """("text", ...) and ("expr", ...) pieces of a template."""
    i = 0
    while i < len(template):
        start = template.find("{", i)
        if start < 0:
            yield "text", template[i:]
            return
        if start > i:
            yield "text", template[i:start]
        depth, quote, j = 0, "", start
        while j < len(template):
            ch = template[j]
            if quote:
                if ch == "\\":
                    j += 1
                elif ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        else:
            raise JSONPathError(f"{template!r}: unclosed '{{'")
        yield "expr", template[start + 1 : j].strip()
        i = j + 1


def parse_template(template: str) -> tuple[Any, ...]:
    stack: list[tuple[tuple[Step, ...] | None, list[Any]]] = [(None, [])]
    for kind, piece in _segments(template):
        body = stack[-1][1]
        if kind == "text":
            body.append(_Text(piece))
        elif piece.startswith("range ") or piece == "range":
            stack.append((parse_path(piece[len("range") :]), []))
        elif piece == "end":
            if len(stack) == 1:
                raise JSONPathError(f"{template!r}: {{end}} without {{range}}")
            steps, inner = stack.pop()
            assert steps is not None
            stack[-1][1].append(_Range(steps, tuple(inner)))
        elif len(piece) >= 2 and piece[0] == piece[-1] and piece[0] in "'\"":
            try:
                body.append(_Text(json.loads('"' + piece[1:-1].replace('"', '\\"') + '"')))
            except ValueError:
                body.append(_Text(piece[1:-1]))
        else:
            body.append(_Expr(parse_path(piece)))
    if len(stack) != 1:
        raise JSONPathError(f"{template!r}: {{range}} without {{end}}")
    return tuple(stack[0][1])


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"))


def _render(nodes: tuple[Any, ...], value: Any) -> str:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, _Text):
            out.append(node.text)
        elif isinstance(node, _Expr):
            out.append(" ".join(_text(v) for v in apply(node.steps, value)))
        else:
            for item in apply(node.steps, value):
                out.append(_render(node.body, item))
    return "".join(out)


def render_template(template: str, value: Any) -> str:
    """A kubectl JSONPath template applied to ``value``."""
    return _render(parse_template(template), value)

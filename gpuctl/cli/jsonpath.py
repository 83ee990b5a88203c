"""kubectl's JSONPath templates (``-o jsonpath=…``, ``--sort-by``, ``-o custom-columns=…``), read and printed as kubectl
reads and prints them.

The grammar: text outside ``{…}`` is printed as it is; inside, ``.field`` (``\\.`` escapes a dot in a key, as in
``{.metadata.labels.kubernetes\\.io/hostname}``), ``[n]``, ``[-n]``, ``[start:stop:step]``, ``[*]`` and ``.*``,
``['key']`` (a path: ``['a.b']`` is ``.a.b``), unions ``[0,2]`` and ``['a', 'b.c']``, recursive descent ``..name``,
filters ``[?(@.x=="y")]`` (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, or a bare path for "exists"), ``{range …}…{end}``,
string literals ``{"\\n"}`` and ``@``/``$`` (the current object). Several results of one action print separated by a
space; a string prints as it is, a number as Go prints it (``4``, ``2.5``, ``1e+06``), ``null`` for null, and a map or
a list as compact JSON with sorted keys.

Missing keys print nothing (kubectl's ``--allow-missing-template-keys``, on by default); with ``allow_missing=False``
they are errors, as are an index out of bounds, a filter on something that is not a list and the like, always.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpuctl.core.errors import InputError


class JSONPathError(InputError, ValueError):
    """A template that cannot be parsed or applied; the message names the problem."""


# ----------------------------------------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class _Text:
    text: str


@dataclass(frozen=True, slots=True)
class _Field:
    name: str


@dataclass(frozen=True, slots=True)
class _Literal:
    value: int | float | bool


@dataclass(frozen=True, slots=True)
class _Wildcard:
    pass


@dataclass(frozen=True, slots=True)
class _Recursive:
    pass


@dataclass(frozen=True, slots=True)
class _Identifier:
    name: str


@dataclass(frozen=True, slots=True)
class _Array:
    start: int | None
    stop: int | None
    step: int | None
    single: bool
    """``[n]``: one element (its stop is start + 1, counted from the end for a negative index)."""


@dataclass(frozen=True, slots=True)
class _Union:
    branches: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True, slots=True)
class _Filter:
    left: tuple[Any, ...]
    op: str
    right: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _Action:
    nodes: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _Range:
    nodes: tuple[Any, ...]
    body: tuple[Any, ...]


# ----------------------------------------------------------------------------------------------- parsing

_TERMINATORS = frozenset(" \t\r\n.,[]$@{}")
_SLICE = re.compile(r"^(-?\d*)(:-?\d*)?(:-?\d*)?$")
_DICT_KEY = re.compile(r"^'([^']*)'$")
_FILTER = re.compile(r"^([^!<>=]+)([!<>=]+)(.+?)$", re.DOTALL)
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"'}


def _unquote(text: str) -> str:
    """A quoted literal (``"…"`` or ``'…'``) with Go's escapes."""
    body = text[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(body):
            raise JSONPathError(f"unquote string {text} error invalid syntax")
        code = body[i + 1]
        if code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        elif code in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[code]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise JSONPathError(f"unquote string {text} error invalid syntax")
            out.append(chr(int(digits, 16)))
            i += 2 + width
        elif code in "01234567":
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or not all(c in "01234567" for c in digits):
                raise JSONPathError(f"unquote string {text} error invalid syntax")
            out.append(chr(int(digits, 8)))
            i += 4
        else:
            raise JSONPathError(f"unquote string {text} error invalid syntax")
    return "".join(out)


class _Parser:
    """One pass over a template, as kubectl's parser reads it: text, then actions between braces."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def template(self) -> list[Any]:
        pieces: list[Any] = []
        while self.pos < len(self.text):
            brace = self.text.find("{", self.pos)
            if brace < 0:
                pieces.append(_Text(self.text[self.pos :]))
                break
            if brace > self.pos:
                pieces.append(_Text(self.text[self.pos : brace]))
            self.pos = brace + 1
            pieces.append(_Action(tuple(self.action(closing="}"))))
        return pieces

    def action(self, closing: str | None) -> list[Any]:
        """The nodes up to ``closing`` (consumed), or to the end of the text when ``closing`` is None."""
        nodes: list[Any] = []
        text = self.text
        while True:
            if self.pos >= len(text):
                if closing is None:
                    return nodes
                raise JSONPathError("unclosed action")
            if closing is not None and text.startswith(closing, self.pos):
                self.pos += len(closing)
                return nodes
            if text.startswith("[?(", self.pos):
                nodes.append(self.filter())
                continue
            if text.startswith("..", self.pos):
                if nodes and isinstance(nodes[-1], _Recursive):
                    raise JSONPathError("invalid multiple recursive descent")
                self.pos += 2
                nodes.append(_Recursive())
                if self.pos < len(text) and (text[self.pos].isalnum() or text[self.pos] == "_"):
                    nodes.append(self.field())
                continue
            ch = text[self.pos]
            if ch in "\r\n":
                raise JSONPathError("unclosed action")
            if ch in " @$":
                self.pos += 1
            elif ch == "[":
                nodes.append(self.array())
            elif ch in "\"'":
                nodes.append(self.quoted(ch))
            elif ch == ".":
                self.pos += 1
                nodes.append(self.field())
            elif ch in "+-" or ch.isdigit():
                nodes.append(self.number())
            elif ch.isalnum() or ch == "_":
                nodes.append(self.identifier())
            else:
                raise JSONPathError(f"unrecognized character in action: U+{ord(ch):04X} {ch!r}")

    def field(self) -> Any:
        start = self.pos
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch == "\\":
                self.pos += 2
            elif ch in _TERMINATORS:
                break
            else:
                self.pos += 1
        value = text[start : self.pos]
        return _Wildcard() if value == "*" else _Field(value.replace("\\", ""))

    def identifier(self) -> Any:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in _TERMINATORS:
            self.pos += 1
        value = self.text[start : self.pos]
        if value in ("true", "false"):
            return _Literal(value == "true")
        return _Identifier(value)

    def number(self) -> Any:
        start = self.pos
        if self.text[self.pos] in "+-":
            self.pos += 1
        while self.pos < len(self.text) and (self.text[self.pos] == "." or self.text[self.pos].isdigit()):
            self.pos += 1
        value = self.text[start : self.pos]
        if re.fullmatch(r"[+-]?\d+", value):
            return _Literal(int(value))
        if re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)", value):
            return _Literal(float(value))
        raise JSONPathError(f"cannot parse number {value}")

    def quoted(self, quote: str) -> Any:
        start = self.pos
        self.pos += 1
        while True:
            if self.pos >= len(self.text) or self.text[self.pos] == "\n":
                raise JSONPathError("unterminated quoted string")
            if self.text[self.pos] == quote and self.text[self.pos - 1] != "\\":
                self.pos += 1
                return _Text(_unquote(self.text[start : self.pos]))
            self.pos += 1

    def array(self) -> Any:
        end = self.pos + 1
        while True:
            if end >= len(self.text) or self.text[end] == "\n":
                raise JSONPathError("unterminated array")
            if self.text[end] == "]":
                break
            end += 1
        inner = self.text[self.pos + 1 : end]
        self.pos = end + 1
        if inner == "*":
            inner = ":"
        parts = inner.split(",")
        if len(parts) > 1:
            return _Union(tuple(tuple(_parse_action(f"[{p.strip(' ')}]")) for p in parts))
        key = _DICT_KEY.match(inner)
        if key:
            nodes = _parse_action("." + key[1])
            return nodes[0] if len(nodes) == 1 else _Union((tuple(nodes),))
        m = _SLICE.match(inner)
        if not m:
            raise JSONPathError(f"invalid array index {inner}")
        start, stop, step = m[1], m[2], m[3]
        if stop is None:  # [n], or [] for [0]: one element
            return _Array(_index(start), None, None, single=True)
        return _Array(_index(start), _index(stop[1:]), _index(step[1:]) if step else None, single=False)

    def filter(self) -> Any:
        self.pos += 3
        start = self.pos
        opened = closed = False
        quote = ""
        while True:
            if self.pos >= len(self.text) or self.text[self.pos] == "\n":
                raise JSONPathError("unterminated filter")
            ch = self.text[self.pos]
            self.pos += 1
            if ch in "\"'":
                if not opened:
                    opened, quote = True, ch
                elif ch == quote and self.text[self.pos - 2] != "\\":
                    closed = True
            elif ch == ")" and opened == closed:
                break
        if self.pos >= len(self.text) or self.text[self.pos] != "]":
            raise JSONPathError("unclosed array expect ]")
        body = self.text[start : self.pos - 1]
        self.pos += 1
        m = _FILTER.match(body)
        if m is None:
            return _Filter(tuple(_parse_action(body)), "exists", ())
        return _Filter(tuple(_parse_action(m[1])), m[2], tuple(_parse_action(m[3])))


def _index(text: str) -> int | None:
    if text == "":
        return None
    if text == "-":
        raise JSONPathError(f"array index {text} is not a number")
    return int(text)


def _parse_action(text: str) -> list[Any]:
    return _Parser(text).action(closing=None)


def _blocks(pieces: Sequence[Any]) -> tuple[Any, ...]:
    """Actions grouped into ``{range}…{end}`` blocks."""
    stack: list[tuple[tuple[Any, ...], list[Any]]] = [((), [])]
    for piece in pieces:
        nodes = piece.nodes if isinstance(piece, _Action) else ()
        if nodes and nodes[0] == _Identifier("range"):
            stack.append((nodes[1:], []))
        elif nodes and nodes[0] == _Identifier("end"):
            if len(stack) == 1:
                raise JSONPathError("not in range, nothing to end")
            over, body = stack.pop()
            stack[-1][1].append(_Range(over, tuple(body)))
        else:
            stack[-1][1].append(piece)
    if len(stack) != 1:
        raise JSONPathError("{range} without {end}")
    return tuple(stack[0][1])


def parse_template(template: str) -> tuple[Any, ...]:
    """A template's pieces; a JSONPathError names what cannot be read."""
    return _blocks(_Parser(template).template())


# ----------------------------------------------------------------------------------------------- evaluation


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "null"


def _children(value: Any) -> list[Any]:
    """What ``*`` and ``..`` step into: a map's values, a list's items, a string's bytes (as kubectl does)."""
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        return list(value.encode())
    return []


def _recursive(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in values:
        children = _children(value)
        if children:
            out.append(value)
            out.extend(_recursive(children))
    return out


def _array(values: list[Any], node: _Array) -> list[Any]:
    out: list[Any] = []
    for value in values:
        if value is None:
            continue
        if not isinstance(value, list):
            raise JSONPathError(f"{_kind(value)} is not array or slice")
        length = len(value)
        start = node.start if node.start is not None else 0
        if start < 0:
            start += length
        if node.single:
            stop = start + 1
        else:
            stop = node.stop if node.stop is not None else length
            if stop < 0:
                stop += length
        if stop == start:
            return out
        if start >= length or start < 0:
            raise JSONPathError(f"array index out of bounds: index {start}, length {length}")
        if stop > length or stop < 0:
            raise JSONPathError(f"array index out of bounds: index {stop - 1}, length {length}")
        if start > stop:
            raise JSONPathError(f"starting index {start} is greater than ending index {stop}")
        step = node.step if node.step is not None else 1
        if step <= 0:
            raise JSONPathError("step must be > 0")
        out.extend(value[start:stop:step])
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(left: Any, op: str, right: Any) -> bool:
    if op not in ("==", "!=", "<", "<=", ">", ">="):
        raise JSONPathError(f"unrecognized filter operator {op}")
    if left is None or right is None:
        same = left is None and right is None
        if op in ("==", "!="):
            return same == (op == "==")
        raise JSONPathError("invalid type for comparison")
    comparable = (_number(left) and _number(right)) or type(left) is type(right)
    if not comparable:
        raise JSONPathError("incompatible types for comparison")
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if isinstance(left, bool | dict | list):
        raise JSONPathError("invalid type for comparison")
    return bool({"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op])


def _filter(values: list[Any], node: _Filter, allow_missing: bool) -> list[Any]:
    out: list[Any] = []
    for value in values:
        if not isinstance(value, list):
            raise JSONPathError(f"{_kind(value)} is not array or slice and cannot be filtered")
        for item in value:
            if node.op == "exists":
                try:
                    found = _walk([item], node.left, allow_missing)
                except JSONPathError:
                    found = []
                if found:
                    out.append(item)
                continue
            lefts = _walk([item], node.left, allow_missing)
            if not lefts:
                continue
            if len(lefts) > 1:
                raise JSONPathError("can only compare one element at a time")
            rights = _walk([item], node.right, allow_missing)
            if not rights:
                continue
            if len(rights) > 1:
                raise JSONPathError("can only compare one element at a time")
            if _compare(lefts[0], node.op, rights[0]):
                out.append(item)
    return out


def _walk(values: list[Any], nodes: Sequence[Any], allow_missing: bool) -> list[Any]:
    for node in nodes:
        if isinstance(node, _Field):
            if not values:
                continue
            values = [v[node.name] for v in values if isinstance(v, dict) and node.name in v]
            if not values and not allow_missing:
                raise JSONPathError(f"{node.name} is not found")
        elif isinstance(node, _Text):
            values = [node.text]
        elif isinstance(node, _Literal):
            values = [node.value for _ in values]
        elif isinstance(node, _Array):
            values = _array(values, node)
        elif isinstance(node, _Wildcard):
            values = [c for v in values for c in _children(v)]
        elif isinstance(node, _Recursive):
            values = _recursive([v for v in values if v is not None])
        elif isinstance(node, _Union):
            values = [r for branch in node.branches for r in _walk(values, branch, allow_missing)]
        elif isinstance(node, _Filter):
            values = _filter(values, node, allow_missing)
        else:
            raise JSONPathError(f"unrecognized identifier {node.name}")
    return values


# ----------------------------------------------------------------------------------------------- printing


def _digits(value: float) -> tuple[str, int]:
    """The shortest digits that read back as ``value`` (no sign, no trailing zeros) and where the point goes."""
    _, digits, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    text = "".join(map(str, digits))
    return text, len(text) + int(exponent)


def go_float(value: float) -> str:
    """A float as Go's ``%v`` prints it: ``4``, ``2.5``, ``1e+06``, ``1.5e-05``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    digits, point = _digits(value)
    sign = "-" if value < 0 else ""
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    return sign + _plain(digits, point)


def _plain(digits: str, point: int) -> str:
    if point <= 0:
        return "0." + "0" * -point + digits
    if point >= len(digits):
        return digits + "0" * (point - len(digits))
    return digits[:point] + "." + digits[point:]


def _json_float(value: float) -> str:
    """A float as Go's encoding/json writes it: plain decimals, exponents only below 1e-6 and from 1e21."""
    if not math.isfinite(value):
        raise JSONPathError(f"unsupported value: {value}")
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    digits, point = _digits(value)
    sign = "-" if value < 0 else ""
    if abs(value) < 1e-6 or abs(value) >= 1e21:
        exponent = point - 1
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}".replace("e-0", "e-")
    return sign + _plain(digits, point)


_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _json_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in _JSON_ESCAPES:
            out.append(_JSON_ESCAPES[ch])
        elif ch < " " or ch in "<>&\u2028\u2029":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def go_json(value: Any) -> str:
    """Compact JSON as kubectl writes a map or a list: keys sorted, numbers as Go writes them, HTML escaped."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _json_float(value)
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_json_string(str(k))}:{go_json(value[k])}" for k in sorted(value, key=str)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    return _json_string(str(value))


def text_of(value: Any) -> str:
    """One result as ``-o jsonpath`` prints it."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    return go_json(value)


def go_sprint(value: Any) -> str:
    """A value as Go's ``fmt.Sprint`` prints it (``-o custom-columns`` cells): ``map[a:1 b:x]``, ``[1 2]``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_sprint(value[k])}" for k in sorted(value, key=str)) + "]"
    if isinstance(value, list | tuple):
        return "[" + " ".join(go_sprint(v) for v in value) + "]"
    return str(value)


def _render(pieces: Sequence[Any], value: Any, allow_missing: bool) -> Iterator[str]:
    for piece in pieces:
        if isinstance(piece, _Text):
            yield piece.text
        elif isinstance(piece, _Action):
            yield " ".join(text_of(v) for v in _walk([value], piece.nodes, allow_missing))
        else:
            for item in _walk([value], piece.nodes, allow_missing):
                yield from _render(piece.body, item, allow_missing)


def render_template(template: str, value: Any, *, allow_missing: bool = True) -> str:
    """A kubectl JSONPath template applied to ``value``."""
    return "".join(_render(parse_template(template), value, allow_missing))


# ----------------------------------------------------------------------------------------------- relaxed paths

_RELAXED = re.compile(r"^\{\.?([^{}]+)\}$|^\.?([^{}]+)$")


def relaxed(expression: str) -> str:
    """kubectl's relaxed path (``--sort-by``, custom columns): ``name``, ``.name``, ``{name}`` and ``{.name}`` all
    mean ``{.name}``."""
    m = _RELAXED.match(expression)
    if m is None:
        raise JSONPathError(
            "unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' or '{.name1.name2}'"
        )
    return "{." + (m[1] or m[2]) + "}"


def results(expression: str, value: Any) -> list[Any]:
    """Every value a relaxed path reaches (missing keys give none)."""
    found: list[Any] = []
    for piece in parse_template(relaxed(expression)):
        if isinstance(piece, _Action):
            found.extend(_walk([value], piece.nodes, True))
        elif isinstance(piece, _Range):
            raise JSONPathError(f"{expression}: a path, not a range")
    return found


def value_at(expression: str, value: Any) -> Any:
    """The first value a relaxed path reaches, or None."""
    found = results(expression, value)
    return found[0] if found else None

"""Every table and every ``-o`` format, in one place: :func:`emit` for lists, :func:`emit_object` for one object.

Output formats are kubectl's: ``table`` (default), ``wide``, ``json``, ``yaml``, ``name``, ``jsonpath=…``,
``jsonpath-file=…``, ``custom-columns=…``, ``custom-columns-file=…``; with ``--sort-by``, ``--no-headers`` and
``--show-labels``. Lists print as Kubernetes lists (``apiVersion``, ``kind``, ``items``).

Tables never hide data: like kubectl, they are not fitted to the terminal at all — every value is printed whole and a
long line wraps where the terminal wraps it. On a terminal the headers are bold and only what is abnormal is coloured
(HELD, DIFFERS, unhealthy, ...); ``NO_COLOR`` turns both off. JSON and YAML go to stdout.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

API_VERSION = "gpuctl.gpustack.ai/v1"
"""The apiVersion of the lists gpuctl computes (views, explanations, ...): not served by any cluster."""

FORMATS = (
    "table",
    "wide",
    "json",
    "yaml",
    "name",
    "jsonpath=",
    "jsonpath-file=",
    "custom-columns=",
    "custom-columns-file=",
)


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    wide_only: bool = False


@dataclass(frozen=True)
class OutputSpec:
    """What ``-o``, ``--sort-by``, ``--no-headers`` and ``--show-labels`` asked for."""

    format: str = "table"
    template: str = ""
    """The JSONPath template, or the custom columns (``HEADER:.path,...``)."""
    sort_by: str | None = None
    no_headers: bool = False
    show_labels: bool = False

    @property
    def wide(self) -> bool:
        return self.format == "wide"

    @property
    def tabular(self) -> bool:
        return self.format in ("table", "wide")


def parse_output(text: str | None, **rest: Any) -> OutputSpec:
    """``-o`` as kubectl spells it; an unknown format is a usage error listing the known ones."""
    from gpuctl.cli.errors import UsageError

    value = (text or "table").strip()
    for prefix in ("jsonpath-file=", "custom-columns-file=", "jsonpath=", "custom-columns="):
        if value.startswith(prefix):
            argument = value[len(prefix) :]
            if not argument:
                raise UsageError(f"-o {value}: give the {prefix.rstrip('=')} after '='")
            if prefix.endswith("-file="):
                try:
                    argument = Path(argument).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise UsageError(f"-o {value}: cannot read {argument}: {exc}") from None
                if prefix.startswith("custom-columns"):
                    lines = [ln.split() for ln in argument.splitlines() if ln.strip()]
                    if len(lines) != 2 or len(lines[0]) != len(lines[1]):
                        raise UsageError(f"-o {value}: expected a line of headers and a line of paths")
                    argument = ",".join(f"{h}:{p}" for h, p in zip(lines[0], lines[1], strict=True))
                else:
                    argument = argument.strip()
            return OutputSpec(prefix.split("-file")[0].rstrip("="), argument, **rest)
    if value not in ("table", "wide", "json", "yaml", "name"):
        raise UsageError(f"-o {value}: unknown output format; use one of {', '.join(FORMATS)}")
    return OutputSpec(value, "", **rest)


# ----------------------------------------------------------------------------------------------- tables


def _styled(stream: TextIO) -> bool:
    return stream.isatty() and os.environ.get("TERM") != "dumb" and not os.environ.get("NO_COLOR")


ABNORMAL = ("HELD", "FAILED", "DIFFERS", "unhealthy", "Draining", "Inactive", "failed", "denied", "not ready")
"""Cell texts that are coloured on a terminal (everything else is left plain)."""


def _colour(cell: str) -> str:
    for word in ABNORMAL:
        if word in cell:
            return f"\x1b[31m{cell}\x1b[0m" if word in ("FAILED", "failed", "denied") else f"\x1b[33m{cell}\x1b[0m"
    return cell


def print_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    wide: bool = False,
    no_headers: bool = False,
    stream: TextIO | None = None,
    empty: str = "No resources found.",
) -> None:
    """Rows under columns, aligned, every value whole; wide-only columns appear with ``-o wide``."""
    out = stream or sys.stdout
    if not rows:
        sys.stderr.write(empty + "\n")
        return
    keep = [i for i, c in enumerate(columns) if wide or not c.wide_only]
    headers = [columns[i].header for i in keep]
    body = [[str(row[i]) for i in keep] for row in rows]
    lines = body if no_headers else [headers, *body]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    styled = _styled(out)
    for n, line in enumerate(lines):
        last = len(line) - 1  # the last cell unpadded: no trailing blanks, styled or not
        cells = [cell if i == last else cell.ljust(widths[i]) for i, cell in enumerate(line)]
        if styled:
            if n == 0 and not no_headers:
                cells = [f"\x1b[1m{c}\x1b[0m" for c in cells]
            else:
                cells = [_colour(c) for c in cells]
        out.write("   ".join(cells).rstrip() + "\n")


def print_json(data: Any, *, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def print_yaml(data: Any, *, stream: TextIO | None = None) -> None:
    import yaml

    out = stream or sys.stdout
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    out.write(yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=False))


# ----------------------------------------------------------------------------------------------- lists


@dataclass
class Listing:
    """A command's list, as every format shows it."""

    kind: str
    """The item kind (``InstanceTypeView``); the JSON list is ``<kind>List``."""
    items: list[dict[str, Any]]
    columns: Sequence[Column] = ()
    row: Callable[[dict[str, Any]], list[str]] = lambda item: []
    name: Callable[[dict[str, Any]], str] = lambda item: str(item.get("name", ""))
    """``-o name``: ``<resource>/<name>``."""
    labels: Callable[[dict[str, Any]], dict[str, str]] | None = None
    """``--show-labels``: the labels of the object an item describes (None: the items have none)."""
    api_version: str = API_VERSION
    empty: str = "No resources found."
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields of the list object besides apiVersion, kind and items."""
    rows: Callable[[dict[str, Any]], list[list[str]]] | None = None
    """Several table rows per item (instead of ``row``): an item that holds a breakdown."""


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, "")
    if isinstance(value, bool):
        return (1, int(value))
    if isinstance(value, int | float):
        return (1, value)
    return (2, value if isinstance(value, str) else json.dumps(value, sort_keys=True))


def sorted_items(items: list[dict[str, Any]], sort_by: str | None) -> list[dict[str, Any]]:
    if not sort_by:
        return items
    from gpuctl.cli.jsonpath import JSONPathError, value_at

    try:
        return sorted(items, key=lambda item: _sort_key(value_at(sort_by, item)))
    except JSONPathError as exc:
        from gpuctl.cli.errors import UsageError

        raise UsageError(f"--sort-by: {exc}") from None


def as_list(listing: Listing, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": listing.api_version, "kind": f"{listing.kind}List", **listing.extra, "items": items}


def custom_columns(spec: str) -> list[tuple[str, str]]:
    from gpuctl.cli.errors import UsageError

    columns = []
    for part in spec.split(","):
        header, sep, path = part.partition(":")
        if not sep or not header or not path:
            raise UsageError(f"-o custom-columns={spec}: each column is HEADER:.json.path")
        columns.append((header, path))
    return columns


def _cell(value: Any) -> str:
    if value is None:
        return "<none>"
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def emit(listing: Listing, output: OutputSpec, *, stream: TextIO | None = None) -> None:
    """Print a list in the format asked for."""
    from gpuctl.cli.errors import UsageError
    from gpuctl.cli.jsonpath import JSONPathError, render_template, value_at

    out = stream or sys.stdout
    items = sorted_items(listing.items, output.sort_by)
    fmt = output.format
    if fmt == "json":
        print_json(as_list(listing, items), stream=out)
    elif fmt == "yaml":
        print_yaml(as_list(listing, items), stream=out)
    elif fmt == "name":
        for item in items:
            out.write(listing.name(item) + "\n")
    elif fmt == "jsonpath":
        try:
            text = render_template(output.template, as_list(listing, items))
        except JSONPathError as exc:
            raise UsageError(f"-o jsonpath: {exc}") from None
        out.write(text + ("" if text.endswith("\n") else "\n"))
    elif fmt == "custom-columns":
        spec = custom_columns(output.template)
        try:
            cells = [[_cell(value_at(path, item)) for _, path in spec] for item in items]
        except JSONPathError as exc:
            raise UsageError(f"-o custom-columns: {exc}") from None
        print_table([Column(h) for h, _ in spec], cells, no_headers=output.no_headers, stream=out, empty=listing.empty)
    else:
        columns = list(listing.columns)
        per_item = listing.rows or (lambda item: [listing.row(item)])
        pairs = [(r, item) for item in items for r in per_item(item)]
        rows = [r for r, _ in pairs]
        if output.show_labels and listing.labels is not None:
            columns.append(Column("LABELS"))
            labeller = listing.labels
            rows = [
                [*r, ",".join(f"{k}={v}" for k, v in sorted(labeller(item).items())) or "<none>"] for r, item in pairs
            ]
        print_table(columns, rows, wide=output.wide, no_headers=output.no_headers, stream=out, empty=listing.empty)


def emit_object(
    obj: dict[str, Any], output: OutputSpec, text: Callable[[], str], *, name: str = "", stream: TextIO | None = None
) -> None:
    """Print one object: its own text for a table, or any structured format."""
    from gpuctl.cli.errors import UsageError
    from gpuctl.cli.jsonpath import JSONPathError, render_template, value_at

    out = stream or sys.stdout
    fmt = output.format
    if fmt == "json":
        print_json(obj, stream=out)
    elif fmt == "yaml":
        print_yaml(obj, stream=out)
    elif fmt == "name":
        out.write(name + "\n")
    elif fmt == "jsonpath":
        try:
            rendered = render_template(output.template, obj)
        except JSONPathError as exc:
            raise UsageError(f"-o jsonpath: {exc}") from None
        out.write(rendered + ("" if rendered.endswith("\n") else "\n"))
    elif fmt == "custom-columns":
        columns = custom_columns(output.template)
        try:
            row = [_cell(value_at(path, obj)) for _, path in columns]
        except JSONPathError as exc:
            raise UsageError(f"-o custom-columns: {exc}") from None
        print_table([Column(h) for h, _ in columns], [row], no_headers=output.no_headers, stream=out)
    else:
        out.write(text())

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
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from gpuctl.cli.refs import ObjectRef

API_VERSION = "gpuctl.gpustack.ai/v1"
"""The apiVersion of the lists gpuctl computes (views, explanations, ...): not served by any cluster."""

FORMATS = (
    "table",
    "wide",
    "json",
    "yaml",
    "name",
    "csv",
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
    allow_missing: bool = True
    """``--allow-missing-template-keys``: a JSONPath key that is missing prints nothing (else it is an error)."""

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
                except UnicodeDecodeError as exc:
                    from gpuctl.core.errors import not_text

                    raise UsageError(f"-o {value}: cannot read {argument}: {not_text(exc)}") from None
                except OSError as exc:
                    raise UsageError(f"-o {value}: cannot read {argument}: {exc}") from None
                if prefix.startswith("custom-columns"):
                    lines = [ln.split() for ln in argument.splitlines() if ln.strip()]
                    if len(lines) != 2 or len(lines[0]) != len(lines[1]):
                        raise UsageError(f"-o {value}: expected a line of headers and a line of paths")
                    argument = ",".join(f"{h}:{p}" for h, p in zip(lines[0], lines[1], strict=True))
                else:
                    argument = argument.strip()
            return OutputSpec(prefix.split("-file")[0].rstrip("="), argument, **rest)
    if value not in ("table", "wide", "json", "yaml", "name", "csv"):
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
    ref: Callable[[dict[str, Any]], ObjectRef] | None = None
    """The object an item describes: ``-o name`` prints it as kubectl does, ``--show-labels`` shows its labels, and
    every structured format gives the item its ``metadata``. None: the items are not about Kubernetes objects."""
    api_version: str = API_VERSION
    empty: str = "No resources found."
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields of the list object besides apiVersion, kind and items."""
    rows: Callable[[dict[str, Any]], list[list[str]]] | None = None
    """Several table rows per item (instead of ``row``): an item that holds a breakdown."""
    failures: Sequence[tuple[str, str]] = ()
    """(where, message) of the parts of a read that failed (a fleet command's contexts): an error row each, an
    ``errors`` field in structured output, and exit 1 once everything else is printed."""
    csv: tuple[Sequence[str], Callable[[dict[str, Any]], list[list[Any]]]] | None = None
    """``-o csv``: the header, and an item's rows with their numbers unformatted; None where a list has no CSV form."""
    footer: Callable[[], str] | None = None
    """Lines printed after a table (``table``, ``wide``): what the list adds up to, which structured formats carry
    in ``extra``."""


def with_metadata(listing: Listing, item: dict[str, Any]) -> dict[str, Any]:
    """The item as structured output shows it: with the ``metadata`` of the object it describes."""
    if listing.ref is None or "metadata" in item:
        return item
    return {"metadata": listing.ref(item).metadata(), **item}


def _quantity(text: str) -> float | None:
    from gpuctl.core.units import QuantityError, parse_quantity

    try:
        return float(parse_quantity(text))
    except (QuantityError, ValueError, ArithmeticError):
        return None


def _less(a: Any, b: Any) -> bool:
    """kubectl's sort order: numbers by value, strings as quantities when both are quantities, else as text."""
    if isinstance(a, str) and isinstance(b, str):
        qa, qb = _quantity(a), _quantity(b)
        if qa is not None and qb is not None:
            return qa < qb
        return a < b
    if (
        isinstance(a, int | float)
        and isinstance(b, int | float)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return a < b
    if isinstance(a, bool) and isinstance(b, bool):
        return a < b
    from gpuctl.cli.errors import UsageError

    raise UsageError(f"--sort-by: cannot order {type(a).__name__} against {type(b).__name__} values")


def sorted_items(items: list[dict[str, Any]], sort_by: str | None) -> list[dict[str, Any]]:
    """Items ordered by ``--sort-by`` as kubectl orders them: by the first value the relaxed path reaches, items
    without one first; a path no item has is an error naming it."""
    if not sort_by or not items:
        return items
    import functools

    from gpuctl.cli.errors import UsageError
    from gpuctl.cli.jsonpath import JSONPathError, relaxed, results

    try:
        path = relaxed(sort_by)
        keyed = [(results(path, item), item) for item in items]
    except JSONPathError as exc:
        raise UsageError(f"--sort-by: {exc}") from None
    if not any(found for found, _ in keyed):
        from gpuctl.cli.errors import RuntimeFailure

        # kubectl exits 1 here: the flag is well formed, the objects lack the field.
        raise RuntimeFailure(f'couldn\'t find any field with path "{path}" in the list of objects')

    def order(x: tuple[list[Any], dict[str, Any]], y: tuple[list[Any], dict[str, Any]]) -> int:
        a = x[0][0] if x[0] else None
        b = y[0][0] if y[0] else None
        if a is None or b is None:  # a missing or null value sorts first, as in kubectl
            return (a is not None) - (b is not None)
        return -1 if _less(a, b) else 1 if _less(b, a) else 0

    return [item for _, item in sorted(keyed, key=functools.cmp_to_key(order))]


def as_list(listing: Listing, items: list[dict[str, Any]]) -> dict[str, Any]:
    out = {"apiVersion": listing.api_version, "kind": f"{listing.kind}List", **listing.extra, "items": items}
    if listing.failures:
        out["errors"] = [{"context": where, "message": message} for where, message in listing.failures]
    return out


def custom_columns(spec: str) -> list[tuple[str, str]]:
    """``HEADER:path,...`` with each path relaxed as kubectl relaxes it (``metadata.name`` is ``{.metadata.name}``)."""
    from gpuctl.cli.errors import UsageError
    from gpuctl.cli.jsonpath import JSONPathError, parse_template, relaxed

    columns = []
    for part in spec.split(","):
        header, sep, path = part.partition(":")
        if not sep or not header or not path:
            raise UsageError(f"-o custom-columns={spec}: each column is HEADER:.json.path")
        try:
            relaxed_path = relaxed(path)
            parse_template(relaxed_path)
        except JSONPathError as exc:
            raise UsageError(f"-o custom-columns: {path}: {exc}") from None
        columns.append((header, relaxed_path))
    return columns


def _cells(spec: list[tuple[str, str]], item: Any) -> list[str]:
    """One custom-columns row: each column's values as Go prints them, joined by commas, or ``<none>``."""
    from gpuctl.cli.errors import UsageError
    from gpuctl.cli.jsonpath import JSONPathError, go_sprint, results

    try:
        return [",".join(go_sprint(v) for v in results(path, item)) or "<none>" for _, path in spec]
    except JSONPathError as exc:
        raise UsageError(f"-o custom-columns: {exc}") from None


def _jsonpath(template: str, value: Any, output: OutputSpec) -> str:
    from gpuctl.cli.errors import UsageError
    from gpuctl.cli.jsonpath import JSONPathError, render_template

    try:
        return render_template(template, value, allow_missing=output.allow_missing)
    except JSONPathError as exc:
        raise UsageError(f"-o jsonpath: {exc}") from None


def _failure_rows(listing: Listing, columns: Sequence[Column], wide: bool) -> list[list[str]]:
    """An error row per failed part: where it failed in the CLUSTER(S) column (else the first), the error in the
    last column shown."""
    shown = [i for i, c in enumerate(columns) if wide or not c.wide_only]
    at = next((i for i in shown if columns[i].header in ("CLUSTER", "CLUSTERS")), shown[0])
    rows = []
    for where, message in listing.failures:
        cells = ["-"] * len(columns)
        cells[at] = where
        cells[shown[-1]] = f"error: {message}"
        rows.append(cells)
    return rows


def emit(listing: Listing, output: OutputSpec, *, stream: TextIO | None = None) -> None:
    """Print a list in the format asked for (then exit 1 if a part of its read failed)."""
    from gpuctl.cli.errors import RuntimeFailure, UsageError

    out = stream or sys.stdout
    fmt = output.format
    # A table shows no metadata: its items take it only when --sort-by may read it.
    if output.tabular and not output.sort_by:
        items = listing.items
    else:
        items = sorted_items([with_metadata(listing, i) for i in listing.items], output.sort_by)
    if fmt == "json":
        print_json(as_list(listing, items), stream=out)
    elif fmt == "yaml":
        print_yaml(as_list(listing, items), stream=out)
    elif fmt == "name":
        if listing.ref is None:
            raise UsageError(f"-o name: {listing.kind} items are not Kubernetes objects; use -o json or -o jsonpath")
        ref = listing.ref
        seen: set[tuple[str, str | None, str]] = set()
        for item in items:  # once per object (several rows may describe one), as kubectl prints them
            r = ref(item)
            if (r.kind.kind, r.namespace, r.name) not in seen:
                seen.add((r.kind.kind, r.namespace, r.name))
                out.write(r.qualified + "\n")
    elif fmt == "jsonpath":
        out.write(_jsonpath(output.template, as_list(listing, items), output))
    elif fmt == "csv":
        if listing.csv is None:
            raise UsageError(f"-o csv: {listing.kind} lists have no CSV form; use -o json or -o custom-columns")
        import csv

        header, csv_rows = listing.csv
        writer = csv.writer(out, lineterminator="\n")
        if not output.no_headers:
            writer.writerow(header)
        for item in items:
            writer.writerows(csv_rows(item))
    elif fmt == "custom-columns":
        spec = custom_columns(output.template)
        print_table(
            [Column(h) for h, _ in spec],
            [_cells(spec, item) for item in items],
            no_headers=output.no_headers,
            stream=out,
            empty=listing.empty,
        )
    else:
        columns = list(listing.columns)
        per_item = listing.rows or (lambda item: [listing.row(item)])
        pairs = [(r, item) for item in items for r in per_item(item)]
        rows = [r for r, _ in pairs]
        if output.show_labels and listing.ref is not None:
            columns.append(Column("LABELS"))
            ref = listing.ref
            rows = [
                [*r, ",".join(f"{k}={v}" for k, v in sorted(ref(item).labels.items())) or "<none>"] for r, item in pairs
            ]
        rows += _failure_rows(listing, columns, output.wide)
        if rows or listing.footer is None:  # with no row, a footer says what there is instead
            print_table(columns, rows, wide=output.wide, no_headers=output.no_headers, stream=out, empty=listing.empty)
        if listing.footer is not None:
            out.write(listing.footer())
    if listing.failures:
        wheres = ", ".join(where for where, _ in listing.failures)
        raise RuntimeFailure(f"{len(listing.failures)} context(s) could not be read: {wheres}")


def emit_object(
    obj: dict[str, Any],
    output: OutputSpec,
    text: Callable[[], str],
    *,
    ref: ObjectRef | None = None,
    stream: TextIO | None = None,
) -> None:
    """Print one answer: its own text for a table, or any structured format; ``-o name`` prints the object it is
    about (``ref``), as kubectl names it."""
    from gpuctl.cli.errors import UsageError

    out = stream or sys.stdout
    fmt = output.format
    if fmt == "json":
        print_json(obj, stream=out)
    elif fmt == "yaml":
        print_yaml(obj, stream=out)
    elif fmt == "name":
        if ref is None:
            raise UsageError("-o name: this answer is not a Kubernetes object; use -o json or -o jsonpath")
        out.write(ref.qualified + "\n")
    elif fmt == "jsonpath":
        out.write(_jsonpath(output.template, obj, output))
    elif fmt == "csv":
        raise UsageError("-o csv: this answer has no CSV form; use -o json or -o custom-columns")
    elif fmt == "custom-columns":
        spec = custom_columns(output.template)
        print_table([Column(h) for h, _ in spec], [_cells(spec, obj)], no_headers=output.no_headers, stream=out)
    else:
        out.write(text())

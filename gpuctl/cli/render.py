"""Every table and every ``-o`` format.

Tables use Rich on a terminal and plain aligned text when piped (never truncated); ``NO_COLOR`` is honoured.
JSON and YAML go to stdout.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TextIO


class Output(StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"
    NAME = "name"


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    wide_only: bool = False


def _use_rich(stream: TextIO) -> bool:
    return stream.isatty() and os.environ.get("TERM") != "dumb"


def print_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    wide: bool = False,
    no_headers: bool = False,
    stream: TextIO | None = None,
) -> None:
    """Print rows under columns; wide-only columns appear with ``-o wide``."""
    out = stream or sys.stdout
    if not rows:
        sys.stderr.write("No resources found.\n")
        return
    keep = [i for i, c in enumerate(columns) if wide or not c.wide_only]
    headers = [columns[i].header for i in keep]
    body = [[str(row[i]) for i in keep] for row in rows]
    if _use_rich(out):
        from rich import box
        from rich.console import Console
        from rich.table import Table

        table = Table(box=box.SIMPLE_HEAD, show_header=not no_headers, pad_edge=False, header_style="bold")
        for h in headers:
            table.add_column(h, overflow="fold", no_wrap=True)
        for r in body:
            table.add_row(*r)
        Console(file=out, no_color=bool(os.environ.get("NO_COLOR")), highlight=False, soft_wrap=True).print(table)
        return
    lines = body if no_headers else [headers, *body]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    for line in lines:
        out.write("   ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() + "\n")


def print_json(data: Any, *, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def print_yaml(data: Any, *, stream: TextIO | None = None) -> None:
    import yaml

    out = stream or sys.stdout
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    out.write(yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=False))


def print_names(kind: str, names: Sequence[str], *, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    for n in names:
        out.write(f"{kind}/{n}\n")


def error(message: str) -> None:
    """One line on stderr."""
    sys.stderr.write(f"error: {message}\n")

"""Options shared by commands, spelled as kubectl spells them."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuctl.cli.render import Output

SnapshotOption = Annotated[
    str | None,
    typer.Option(
        "--snapshot",
        envvar="GPUCTL_SNAPSHOT",
        help="Read objects from snapshot files (a file or directory of YAML/JSON) instead of a cluster.",
        show_default=False,
    ),
]
OutputOption = Annotated[Output, typer.Option("--output", "-o", help="Output format.", case_sensitive=False)]
NoHeadersOption = Annotated[bool, typer.Option("--no-headers", help="Print tables without their header row.")]
SelectorOption = Annotated[
    str | None, typer.Option("--selector", "-l", help="Label selector (e.g. key=value,other!=x).", show_default=False)
]


def open_source(snapshot: str | None):  # type: ignore[no-untyped-def]
    """The object source for this invocation."""
    from gpuctl.cli.errors import UsageError

    if snapshot:
        from gpuctl.cluster.snapshot import SnapshotSource

        return SnapshotSource(snapshot)
    raise UsageError("no snapshot given: pass --snapshot PATH or set GPUCTL_SNAPSHOT")

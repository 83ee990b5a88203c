"""Options shared by commands, spelled as kubectl spells them, and the object source they select."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gpuctl.cli.render import Output

if TYPE_CHECKING:
    from gpuctl.cluster.read import Source

SnapshotOption = Annotated[
    str | None,
    typer.Option(
        "--snapshot",
        envvar="GPUCTL_SNAPSHOT",
        help="Read objects from snapshot files (a file or directory of YAML/JSON) instead of a cluster.",
        show_default=False,
    ),
]
KubeconfigOption = Annotated[
    str | None, typer.Option("--kubeconfig", help="Path to the kubeconfig file.", show_default=False)
]
ContextOption = Annotated[
    str | None, typer.Option("--context", help="The kubeconfig context to use.", show_default=False)
]
TimeoutOption = Annotated[
    str | None,
    typer.Option(
        "--request-timeout",
        help="How long to wait for one API request (e.g. 10s, 1m; 0 waits forever).",
        show_default=False,
    ),
]
NamespaceOption = Annotated[
    str | None, typer.Option("--namespace", "-n", help="The namespace to read.", show_default=False)
]
AllNamespacesOption = Annotated[bool, typer.Option("--all-namespaces", "-A", help="Read every namespace.")]
OutputOption = Annotated[Output, typer.Option("--output", "-o", help="Output format.", case_sensitive=False)]
NoHeadersOption = Annotated[bool, typer.Option("--no-headers", help="Print tables without their header row.")]
SelectorOption = Annotated[
    str | None, typer.Option("--selector", "-l", help="Label selector (e.g. key=value,other!=x).", show_default=False)
]


def parse_timeout(text: str | None) -> float | None:
    """kubectl's --request-timeout: a number of seconds or a duration such as 10s, 2m, 1h; 0 means no timeout."""
    from gpuctl.cli.errors import UsageError

    if text is None or text.strip() in ("", "0"):
        return None
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    t = text.strip()
    for suffix in ("ms", "s", "m", "h"):
        if t.endswith(suffix):
            number, scale = t[: -len(suffix)], units[suffix]
            break
    else:
        number, scale = t, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise UsageError(f"--request-timeout {text!r}: use a duration such as 10s, 2m or 1h") from None
    if value < 0:
        raise UsageError(f"--request-timeout {text!r}: a timeout cannot be negative")
    return value or None


def open_source(
    snapshot: str | None,
    kubeconfig: str | None = None,
    context: str | None = None,
    request_timeout: str | None = None,
) -> Source:
    """A snapshot when one is named, the cluster of the kubeconfig otherwise."""
    if snapshot:
        from gpuctl.cluster.snapshot import SnapshotSource

        return SnapshotSource(snapshot)
    from gpuctl.cluster.live import Connection, LiveSource

    return LiveSource(Connection(kubeconfig, context, parse_timeout(request_timeout)))

"""Read objects from a source and parse them into core records: the one place raw objects become records."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, Protocol

from gpuctl.cluster import kinds
from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.kinds import Kind
from gpuctl.core.instancetypes import InstanceType, parse_instancetype
from gpuctl.core.ledger import LedgerError, NodeDevices, parse_devices
from gpuctl.core.nodes import Node, parse_node


class Source(Protocol):
    """Where objects come from: a live API server or snapshot files."""

    def describe(self) -> str: ...

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]: ...


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def not_found(kind: str, name: str, known: Sequence[str], where: str) -> SourceError:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.85)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return SourceError(f'{kind} "{name}" not found in {where}{hint}')


def instancetypes(
    source: Source, names: Sequence[str] = (), *, label_selector: str | None = None
) -> list[InstanceType]:
    """InstanceTypes by name (all when none given), sorted by name; an unknown name is an error naming close ones."""
    objs = source.list(kinds.INSTANCETYPE, label_selector=label_selector)
    by_name = {_name(o): o for o in objs}
    if names:
        missing = [n for n in names if n not in by_name]
        if missing:
            raise not_found("instancetype", missing[0], sorted(by_name), source.describe())
        chosen = [by_name[n] for n in dict.fromkeys(names)]
    else:
        chosen = [by_name[n] for n in sorted(by_name)]
    return [parse_instancetype(o) for o in chosen]


def devices(source: Source) -> list[NodeDevices]:
    out = []
    for obj in source.list(kinds.DEVICES):
        try:
            out.append(parse_devices(obj))
        except LedgerError as exc:
            raise SourceError(f"{source.describe()}: {exc}") from None
    return out


def nodes(source: Source) -> list[Node]:
    return [parse_node(o) for o in source.list(kinds.NODE)]


def cluster_queues(source: Source) -> dict[str, dict[str, Any]]:
    return {_name(o): o for o in source.list(kinds.CLUSTERQUEUE)}

"""Reading a cluster's Events, bounded: the newest few thousand of a namespace (or all), from either Events API.

A live cluster serves every Event through ``events.k8s.io/v1`` (the core ``v1`` Events are the same objects), read
page by page while only the newest are held. A snapshot may hold either spelling (``gpuctl dump`` writes the first,
``kubectl get events -o json`` the second); both are read.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from gpuctl.cluster import kinds

MAX_EVENTS = 20_000
"""Events read at most (the newest): enough for every Workload's recent story, bounded on a busy cluster."""
MAX_EVENT_TEXT = 1024
"""Characters of an Event's note kept (the API server accepts no longer one through ``events.k8s.io``)."""


def event_time(obj: dict[str, Any]) -> str:
    """When an Event last happened, as it sorts (RFC 3339 strings sort by time)."""
    series = obj.get("series")
    meta = obj.get("metadata")
    for value in (
        series.get("lastObservedTime") if isinstance(series, dict) else None,
        obj.get("deprecatedLastTimestamp"),
        obj.get("lastTimestamp"),
        obj.get("eventTime"),
        meta.get("creationTimestamp") if isinstance(meta, dict) else None,
    ):
        if isinstance(value, str) and value:
            return value
    return ""


def newest(objects: Iterable[Any], limit: int = MAX_EVENTS) -> tuple[list[dict[str, Any]], int]:
    """The newest ``limit`` Events, notes cut to :data:`MAX_EVENT_TEXT`, oldest first; and how many were left out.
    Only ``limit`` Events are held at any time, however many are read."""
    kept: list[tuple[str, int, dict[str, Any]]] = []
    seen = 0
    for obj in objects:
        if not isinstance(obj, dict):
            continue
        for field in ("note", "message"):
            text = obj.get(field)
            if isinstance(text, str) and len(text) > MAX_EVENT_TEXT:
                obj = {**obj, field: text[: MAX_EVENT_TEXT - 1] + "…"}
        entry = (event_time(obj), seen, obj)
        seen += 1
        if len(kept) < limit:
            heapq.heappush(kept, entry)
        elif entry[:2] > kept[0][:2]:
            heapq.heapreplace(kept, entry)
    return [obj for _, _, obj in sorted(kept, key=lambda e: e[:2])], seen - len(kept)


def read_events(source: Any, namespace: str | None = None, limit: int = MAX_EVENTS) -> tuple[list[dict[str, Any]], int]:
    """The newest Events of a namespace (None: every namespace) and how many older ones were left out."""
    if getattr(source, "is_snapshot", False):
        objects: Iterable[Any] = [
            *source.list(kinds.EVENT, namespace=namespace),
            *source.list(kinds.CORE_EVENT, namespace=namespace),
        ]
    else:
        pages = source.list_pages(kinds.EVENT, namespace=namespace, page_size=max(1, min(limit, 5000)))
        objects = (item for page in pages for item in page.items)
    return newest(objects, limit)

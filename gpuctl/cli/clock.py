"""The clock every age and duration a command prints is measured against: the time a snapshot was taken where it
records one, else now. Tests fix it by replacing :func:`now`."""

from __future__ import annotations

import time
from typing import Any


def now() -> float:
    """Seconds since the epoch."""
    return time.time()


def of(source: Any) -> float:
    """The "now" of what ``source`` shows: a dump's own time (when ``gpuctl dump`` started reading), else now."""
    from gpuctl.cluster import read

    return read.taken_at(source) or now()

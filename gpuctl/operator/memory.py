"""What a review costs in memory, and the budget reviews are admitted by, so the worst mix of concurrent maximal
reviews cannot take the operator past its memory limit.

**Cost.** Decoding JSON in Python costs far more than its bytes: a list is 80 bytes for the two bytes ``[]``, a dict
with one key over 230 bytes. Measured with ``tracemalloc`` on 1 MiB documents of one repeated shape each (a unit test
repeats it on a maximal review), decoding takes 2x the body for one long string, 3-6x for Kubernetes objects
as the API server writes them, 25x for ``[{},{},...]`` and 40x for lists nested in lists, the most any shape takes;
a mutating rule copies what it may change, up to the whole object again. :func:`review_cost` bounds that from the
body's bytes alone, in one pass of ``bytes.count`` (about 1 ms for 7 MiB): its text width (a non-ASCII character
makes the decoded text and its strings up to 4 bytes a character), and what each ``{``, ``[``, ``{}``, ``[]``,
``,``, ``:`` and ``"`` can cost, constants chosen above every shape measured (a unit test checks the bound on a corpus of shapes and
on generated documents). A Kubernetes object is charged about 2x what it takes, the worst shapes about 1.1x.

**Budget.** With a memory limit known (``--memory-limit``, the ``GPUCTL_MEMORY_LIMIT`` environment variable the
Deployment sets from the container's limit, or the cgroup's), a review starts only while the process's resident
memory when no review runs (the cache, the interpreter), plus every running review's cost, plus its own, stays under
``target`` of the limit; it waits otherwise, until its deadline, and is then answered by failure policy as busy (a
retryable answer). A review that alone would not fit is answered at once. Without a known limit, the reviews running
at once may cost :data:`UNLIMITED_BUDGET` between them.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

DICT = 160
"""Bytes each ``{`` may cost: a dict with its first key and table (230+ bytes per 9 input bytes at worst)."""
LIST = 88
"""Bytes each ``[`` may cost: a list with its first slot (80 bytes for the ``[[]]`` of lists nested in lists)."""
EMPTY = 80
"""Bytes each ``{}`` or ``[]`` may cost: an empty dict or list (64 and 56 bytes with their collector header)."""
ITEM = 32
"""Bytes each ``,`` or ``:`` may cost: a slot, a dict entry, a float or an int object."""
QUOTE = 28
"""Bytes each ``"`` may cost (a string is two): its object header, a dict key's hash entry and memo."""
FLOOR = 64 * 1024
"""What any review costs whatever its size: its answer, the rule's context, a thread's working set."""
MUTATING_COPY = 2
"""A mutating rule copies what it may change, at worst everything it read (measured: the Pod, Instance and
InstanceType defaulting rules take twice what decoding took)."""
UNLIMITED_BUDGET = 256 * 1024 * 1024
"""What the reviews running at once may cost between them when no memory limit is known."""
_WIDE = re.compile(rb"[\xc4-\xf4]")
"""A UTF-8 lead byte of a character past U+00FF: the decoded text is then 2 or 4 bytes a character."""


def review_cost(body: bytes | bytearray, mutating: bool) -> int:
    """An upper bound on the bytes decoding and answering ``body`` allocates at its peak: the body, its decoded
    objects (copied by a mutating rule), and the answer (at most the body's size again)."""
    size = len(body)
    if body.isascii():
        text, chars = 1, (4 if b"\\u" in body else 1)
    else:
        text = 4 if _WIDE.search(body) else 1
        chars = 4
    empty_dicts, empty_lists = body.count(b"{}"), body.count(b"[]")
    parse = (
        size * (text + 2 * chars)
        + DICT * (body.count(b"{") - empty_dicts)
        + LIST * (body.count(b"[") - empty_lists)
        + EMPTY * (empty_dicts + empty_lists)
        + ITEM * (body.count(b",") + body.count(b":"))
        + QUOTE * body.count(b'"')
    )
    if mutating:
        parse *= MUTATING_COPY
    return 2 * size + parse + FLOOR


# ----------------------------------------------------------------------------------------------- the process


def parse_bytes(text: str) -> int:
    """``805306368``, ``768Mi``, ``1G``, ``0.75Gi`` → bytes; ValueError otherwise."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?|[kmgt]|)\s*", text)
    if match is None:
        raise ValueError(f"{text!r} is not an amount of memory (768Mi, 1Gi, 805306368)")
    number, unit = match.groups()
    scale = {"": 1, "k": 1000, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}.get(unit)
    if scale is None:
        scale = 1024 ** ("KMGT".index(unit[0]) + 1)
    value = int(float(number) * scale)
    if value <= 0:
        raise ValueError(f"{text!r}: a memory limit is more than 0 bytes")
    return value


CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
"""Where a container's memory limit is read (cgroup v2, then v1)."""


def detect_memory_limit(
    environ: dict[str, str] | None = None, cgroup_files: tuple[str, ...] = CGROUP_FILES
) -> int | None:
    """The process's memory limit: ``GPUCTL_MEMORY_LIMIT`` (set by the Deployment from the container's limit), else
    the cgroup's; None when there is none (``max``, or a v1 limit past any machine's memory)."""
    raw = (os.environ if environ is None else environ).get("GPUCTL_MEMORY_LIMIT", "")
    if raw:
        return parse_bytes(raw)
    for path in cgroup_files:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
        return None
    return None


def resident_bytes() -> int | None:
    """The process's resident memory now (Linux), or None where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def release_free_memory() -> None:
    """Hand the C allocator's free pages back to the system (glibc ``malloc_trim``), so the resident size measured
    when no review runs is what the process holds, not what large reviews left free. A no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return


# ----------------------------------------------------------------------------------------------- the budget


@dataclass(eq=False)
class Charge:
    """What one review holds of the budget."""

    amount: int = 0


class MemoryBudget:
    """Reviews admitted by cost, on the event loop (``acquire`` waits for room, ``release`` makes it).

    With ``limit``: a review may start while ``base + charged + cost <= target * limit``, where ``base`` is the
    resident memory when no review runs (sampled whenever none does; while some do, the resident size less what they
    are charged, if that is more), so the cache's growth counts as it happens. Without: ``charged + cost <=
    fixed``."""

    def __init__(
        self,
        limit: int | None,
        target: float,
        *,
        fixed: int = UNLIMITED_BUDGET,
        resident: Callable[[], int | None] = resident_bytes,
        trim: Callable[[], None] = release_free_memory,
    ) -> None:
        self.limit = limit
        self.target = target
        self.fixed = fixed
        self.resident = resident
        self.trim = trim
        self.charged = 0
        self.running = 0
        self._idle = (resident() or 0) if limit is not None else 0
        self._cond = asyncio.Condition()

    def base(self) -> int:
        """The resident memory reviews do not account for: the cache, the interpreter, the server."""
        now = self.resident()
        if now is None:
            return self._idle
        if self.running == 0:
            self._idle = now
            return now
        return max(self._idle, now - self.charged)

    def capacity(self) -> int:
        """What the running reviews may cost between them now."""
        if self.limit is None:
            return self.fixed
        return max(0, int(self.target * self.limit) - self.base())

    async def acquire(self, charge: Charge, amount: int, timeout: float, share: float = 1.0) -> bool:
        """Add ``amount`` to ``charge`` once it fits in ``share`` of the capacity (bodies being read may hold half,
        so reviews that have their body can always proceed); False when it did not fit before ``timeout``."""

        def fits() -> bool:
            return self.charged + amount <= self.capacity() * share

        async with self._cond:
            try:
                await asyncio.wait_for(self._cond.wait_for(fits), timeout)
            except (TimeoutError, asyncio.TimeoutError):  # one class from 3.11 on, two before
                return False
            if charge.amount == 0:
                self.running += 1
            self.charged += amount
            charge.amount += amount
            return True

    async def release(self, charge: Charge) -> None:
        async with self._cond:
            self.charged -= charge.amount
            if charge.amount:
                self.running -= 1
            large = charge.amount > 8 * 1024 * 1024
            charge.amount = 0
            if self.running == 0 and large:
                asyncio.get_running_loop().run_in_executor(None, self.trim)
            self._cond.notify_all()

    async def recheck(self) -> None:
        """Wake the waiting reviews to look at the capacity again (resident memory moves without a release)."""
        async with self._cond:
            self._cond.notify_all()

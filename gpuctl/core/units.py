"""Units of account and Kubernetes quantities.

One whole accelerator is worth ``M`` units (and ``M`` credits). A shared request takes one share of ``M / 10``;
one percent of a card's memory is ``M / 100``.
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from fractions import Fraction
from typing import Final

from gpuctl.core.errors import GpuctlError

M: Final = 1_600_000
"""Units (and credits) per whole accelerator."""

SHARES_PER_CARD: Final = 10
SHARE: Final = M // SHARES_PER_CARD
"""Units one shared token takes: 160,000."""

PERCENT: Final = M // 100
"""Units of one percent of a card's memory: 16,000."""

SLICED_MAX_SIZE: Final = 512
"""The finest logical slice grid: M / 512 = 3,125 units."""


class QuantityError(GpuctlError, ValueError):
    """A string that is not a Kubernetes quantity."""


_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY: Final = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))$"
)


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity (``"64Gi"``, ``"100m"``, ``"1.5"``, ``"1e3"``, ``2``) exactly.

    Raises QuantityError naming the value and the accepted forms.
    """
    if isinstance(value, bool):
        raise QuantityError(
            f"{value!r} is not a quantity: use a number with an optional suffix such as 64Gi, 500m or 2"
        )
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(Decimal(repr(value)))
    if not isinstance(value, str):
        raise QuantityError(
            f"{value!r} is not a quantity: use a number with an optional suffix such as 64Gi, 500m or 2"
        )
    return _parse_text(value)


@functools.lru_cache(maxsize=8192)
def _parse_text(value: str) -> Fraction:
    """A quantity written as text (cached: a cluster repeats a few spellings many times)."""
    text = value.strip()
    if not text:
        raise QuantityError(
            f"{value!r} is not a quantity: use a number with an optional suffix such as 64Gi, 500m or 2"
        )
    if len(text) > 64:
        raise QuantityError(f"{value[:20]!r}...: a quantity has at most 64 characters")
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(
            f"{value!r} is not a quantity: use a number with an optional suffix "
            "(Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an exponent such as 1e3)"
        )
    number = Fraction(Decimal(match["num"]))
    if match["bin"]:
        return number * _BINARY[match["bin"]]
    if match["exp"]:
        exponent = int(match["exp"][1:])
        if abs(exponent) > 64:
            raise QuantityError(f"{value!r}: the exponent is out of range (at most 64)")
        return number * Fraction(10) ** exponent
    return number * _DECIMAL[match["dec"] or ""]


def parse_count(value: str | int | float) -> int:
    """A quantity that must be a whole number (device counts, units)."""
    q = parse_quantity(value)
    if q.denominator != 1:
        raise QuantityError(f"{value!r} is not a whole number")
    return int(q)


def quantity_to_mib(value: str | int | float) -> int:
    """Bytes given as a quantity, in whole MiB (rounded down)."""
    return int(parse_quantity(value) // (2**20))


def format_quantity(value: Fraction | int, *, binary: bool = False) -> str:
    """Format a quantity the way Kubernetes writes it canonically for whole values.

    ``binary`` picks the largest exact binary suffix (``64Gi``); otherwise the largest exact decimal suffix
    (``1600k``, ``12800k``, ``500m``).
    """
    q = Fraction(value)
    if q == 0:
        return "0"
    if binary and q.denominator == 1:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if q % _BINARY[suffix] == 0:
                return f"{int(q / _BINARY[suffix])}{suffix}"
        return str(int(q))
    for suffix in ("E", "P", "T", "G", "M", "k", "", "m", "u", "n"):
        scaled = q / _DECIMAL[suffix]
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    # Finer than a nano unit: round up to nano, as Kubernetes does.
    return f"{-((-q * 10**9) // 1)}n"


def percent_to_units(percent: int) -> int:
    """A memory percentage of one card in units: p x 16,000."""
    return percent * PERCENT


def mib_to_units(mib: int, card_mib: int) -> int:
    """A memory demand in MiB over a card of ``card_mib`` MiB, in units: floor(m x M / card)."""
    if card_mib <= 0:
        raise ValueError("card memory must be positive")
    return mib * M // card_mib

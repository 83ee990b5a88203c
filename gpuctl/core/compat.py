"""What gpuctl uses of Python 3.11 and later, on 3.10 too (the oldest Python it supports)."""

from __future__ import annotations

import sys
from enum import Enum

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:

    class StrEnum(str, Enum):
        """Members are their values: ``str()`` and ``format()`` give the value, as 3.11's ``enum.StrEnum`` does."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)


__all__ = ["StrEnum"]

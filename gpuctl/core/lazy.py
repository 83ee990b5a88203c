"""Mappings whose values are made when first read: explaining the Workloads of a large cluster reads the ledgers and
Nodes of the few that wait, and the indexes only some verdicts use, so only those are parsed, rebuilt or built.

Making a value is deterministic, so two threads reading one key at once get equal values (one of them kept)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class MadeOnRead(Mapping[K, V]):
    """One value per key of ``keys``, made by ``make(key)`` the first time it is read and kept. Iterating, ``len`` and
    ``in`` read the keys alone; reading every value makes every one (once)."""

    __slots__ = ("_keys", "_made", "_make")

    def __init__(self, keys: Mapping[K, Any], make: Callable[[K], V]) -> None:
        self._keys = keys
        self._make = make
        self._made: dict[K, V] = {}

    def __getitem__(self, key: K) -> V:
        made = self._made.get(key)
        if made is None:
            if key not in self._keys:
                raise KeyError(key)
            made = self._made[key] = self._make(key)
        return made

    def __iter__(self) -> Iterator[K]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys


class OnFirstRead(Mapping[K, V]):
    """A whole mapping made by ``make()`` the first time any of it is read."""

    __slots__ = ("_made", "_make")

    def __init__(self, make: Callable[[], Mapping[K, V]]) -> None:
        self._make = make
        self._made: Mapping[K, V] | None = None

    def _mapping(self) -> Mapping[K, V]:
        made = self._made
        if made is None:
            made = self._made = self._make()
        return made

    def __getitem__(self, key: K) -> V:
        return self._mapping()[key]

    def get(self, key: K, default: Any = None) -> Any:
        return self._mapping().get(key, default)

    def __iter__(self) -> Iterator[K]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())

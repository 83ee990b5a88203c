"""Mappings whose values are made when first read: they answer as the plain mapping they stand for."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuctl.core.lazy import MadeOnRead, OnFirstRead


@given(st.dictionaries(st.text(max_size=3), st.integers()), st.lists(st.text(max_size=3)))
def test_a_mapping_made_on_read_answers_as_the_plain_one(keys: dict[str, int], reads: list[str]) -> None:
    made: list[str] = []

    def make(key: str) -> int:
        made.append(key)
        return keys[key] * 2

    lazy = MadeOnRead(keys, make)
    plain = {k: v * 2 for k, v in keys.items()}
    assert list(lazy) == list(plain) and len(lazy) == len(plain) and made == []
    for key in reads:
        assert (key in lazy) == (key in plain) and lazy.get(key) == plain.get(key)
    assert sorted(made) == sorted(set(made)) and set(made) <= set(reads)  # each made at most once, only if read
    assert dict(lazy) == plain


def test_a_missing_key_is_a_key_error_and_makes_nothing() -> None:
    made: list[str] = []
    lazy = MadeOnRead({"a": 1}, lambda k: made.append(k) or 1)
    with pytest.raises(KeyError):
        lazy["b"]
    assert made == []


def test_a_whole_mapping_is_made_once_when_first_read() -> None:
    made: list[int] = []

    def make() -> dict[str, int]:
        made.append(1)
        return {"a": 1}

    lazy: OnFirstRead[str, int] = OnFirstRead(make)
    assert made == []
    assert lazy["a"] == 1 and lazy.get("b") is None and list(lazy) == ["a"] and len(lazy) == 1 and made == [1]

"""Fixtures for every suite."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _names_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Completions remember names in a cache of the test's own (never the user's), inherited by the processes a test
    starts."""
    directory = tmp_path_factory.mktemp("names")
    monkeypatch.setenv("GPUCTL_CACHE_DIR", str(directory))
    return directory

"""The snapshot reader is total: whatever a snapshot holds — any field of any object replaced by a value of another
type, at any depth, or integers too large for any field — a read command gives its answer or one line on stderr
(exit 1), never a traceback."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.cluster.snapshot import read_objects, snapshot_files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "snapshot"
OBJECTS: list[dict[str, Any]] = [o for f in snapshot_files(EXAMPLE) for o in read_objects(f)]
COMMANDS = (
    ("views", "-o", "json"),
    ("views", "--by-card", "-o", "json"),
    ("partitions", "-o", "json"),
    ("workloads", "-A", "-o", "json"),
    ("explain", "workload", "team-a/embed", "-o", "json"),
    ("instance", "list", "-A", "-o", "json"),
)
HUGE = [10**400, -(10**400), 2**64, -(2**63) - 1, 10**4000]
"""Integers no Kubernetes field holds: beyond int64, beyond a float, near Python's digit limit for conversion."""

runner = CliRunner()


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into ``value`` (dict keys and list indexes), at every depth."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*prefix, i))


def replaced(obj: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    out = copy.copy(obj)
    out[path[0]] = replaced(obj[path[0]], path[1:], new)
    return out


def at(obj: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        obj = obj[step]
    return obj


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(HUGE),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["", "1", "-1", "1e400", "NaN", "8Gi", "x" * 300, "nvidia.com/gpu"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)


def kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


@st.composite
def mutated_snapshot(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The example snapshot with one to three values replaced by values of another type."""
    objects = list(OBJECTS)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(objects) - 1))
        path = draw(st.sampled_from(list(paths(objects[i]))))
        old = at(objects[i], path)
        new = draw(VALUES.filter(lambda v, old=old: kind_of(v) != kind_of(old)))  # type: ignore[misc]
        objects[i] = replaced(objects[i], path, new)
    return objects


def write(tmp: Path, objects: list[Any]) -> Path:
    snapshot = tmp / "snapshot"
    snapshot.mkdir(exist_ok=True)
    (snapshot / "objects.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return snapshot


def answers_or_one_line(snapshot: Path) -> None:
    for args in COMMANDS:
        result = runner.invoke(app, [*args, "--snapshot", str(snapshot)])
        detail = f"gpuctl {' '.join(args)}: {result.exception!r}\n{result.stderr}"
        assert result.exception is None or isinstance(result.exception, SystemExit), detail
        assert result.exit_code in (0, 1, 3), detail
        if result.exit_code == 1:
            assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, detail
        else:
            json.loads(result.stdout)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(objects=mutated_snapshot())
def test_any_field_of_another_type_gives_an_answer_or_one_line(tmp_path: Path, objects: list[dict[str, Any]]) -> None:
    answers_or_one_line(write(tmp_path, objects))


@pytest.mark.parametrize("digits", [4301, 10_000])
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_an_integer_past_the_digit_limit_is_one_line(tmp_path: Path, digits: int, suffix: str) -> None:
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    text = json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "generation": 0}})
    (snapshot / f"node{suffix}").write_text(text.replace('"generation": 0', '"generation": ' + "9" * digits))
    result = runner.invoke(app, ["views", "--snapshot", str(snapshot)])
    assert result.exit_code == 1 and (result.exception is None or isinstance(result.exception, SystemExit))
    assert result.stderr.startswith(f"error: {snapshot / ('node' + suffix)}") and result.stderr.count("\n") == 1
    assert "digit" in result.stderr


@pytest.mark.parametrize("metadata", [None, "n", 5, ["n"], True])
def test_metadata_of_another_type_is_one_line_or_read(tmp_path: Path, metadata: Any) -> None:
    objects = [replaced(o, ("metadata",), metadata) if o["kind"] == "Node" else o for o in OBJECTS]
    answers_or_one_line(write(tmp_path, objects))

"""The operator's memory bound: a review's cost bounds what answering it really allocates (measured with
tracemalloc, on the costliest shapes and on generated documents), the budget admits by it, and the operator with
the 5,000-node synthetic cluster in its cache stays under 60 % of its memory limit under the worst concurrent mix
of maximal reviews."""

from __future__ import annotations

import asyncio
import gc
import json
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.operator_memory import LIMIT, MIX, SHAPES, measure
from bench.operator_memory import maximal_review as review_of
from gpuctl.core.instancetypes import parse_instancetype
from gpuctl.core.webhooks import BY_PATH, REGISTRY, WebhookContext
from gpuctl.operator.admission import answer
from gpuctl.operator.memory import Charge, MemoryBudget, detect_memory_limit, parse_bytes, review_cost
from testbed.factories import instancetype
from testbed.request_examples import EXAMPLES


class Fixed:
    ctx = WebhookContext(instancetypes=(parse_instancetype(instancetype()),))

    def webhook_context(self, namespace: str, obj: Any = None) -> WebhookContext:
        return self.ctx


def peak_of_answering(path: str, body: bytes) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        answer(BY_PATH[path], body, Fixed())
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("path", "shape"), sorted(set(MIX) | {(w.path, "objects") for w in REGISTRY}))
def test_the_cost_bounds_what_answering_a_review_takes(path: str, shape: str) -> None:
    body = review_of(path, shape, "u", size=512 * 1024)
    peak, cost = peak_of_answering(path, body), review_cost(body, BY_PATH[path].mutating)
    assert peak <= cost, f"{peak / len(body):.1f}x measured, {cost / len(body):.1f}x charged"


def test_the_costliest_shape_at_full_size_is_bounded_and_costs_what_the_docs_say() -> None:
    body = review_of("/validate-instancetypes", "lists in lists", "u")
    peak, cost = peak_of_answering("/validate-instancetypes", body), review_cost(body, False)
    assert 35 < peak / len(body) < 45 and peak <= cost  # about 40x its bytes


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10), inner, max_size=6),
    max_leaves=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=JSON, copies=st.integers(100, 2000), path=st.sampled_from([w.path for w in REGISTRY]))
def test_the_cost_bounds_generated_documents(value: Any, copies: int, path: str) -> None:
    pod = json.loads(json.dumps(next(e for e in EXAMPLES if e.id == "rule2-accept").pod))
    pod["spec"]["containers"][0]["x"] = [value] * 1  # a place every Pod rule reads and copies
    filler = json.dumps([value for _ in range(copies)], ensure_ascii=False)
    body = json.dumps(
        {"request": {"uid": "u", "operation": "CREATE", "namespace": "default", "object": pod}}, ensure_ascii=False
    ).replace(json.dumps([value], ensure_ascii=False), filler, 1)
    raw = body.encode()
    assert peak_of_answering(path, raw) <= review_cost(raw, BY_PATH[path].mutating)


# ----------------------------------------------------------------------------------------------- the limit


@pytest.mark.parametrize(
    ("text", "expected"),
    [("805306368", 805306368), ("768Mi", 768 << 20), ("1Gi", 1 << 30), ("0.5Gi", 1 << 29), ("2G", 2 * 10**9)],
)
def test_memory_amounts(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-1Gi", "0", "768MB", "1Ki Mi"])
def test_bad_memory_amounts_name_the_spelling(text: str) -> None:
    with pytest.raises(ValueError, match=r"768Mi|more than 0"):
        parse_bytes(text)


def test_the_limit_comes_from_the_environment_then_the_cgroup(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    files = (str(v2), str(v1))
    assert detect_memory_limit({"GPUCTL_MEMORY_LIMIT": "768Mi"}, files) == 768 << 20
    assert detect_memory_limit({}, files) is None  # neither file: not in a container
    v1.write_text("9223372036854771712\n")  # cgroup v1 without a limit
    assert detect_memory_limit({}, files) is None
    v1.write_text("536870912\n")
    assert detect_memory_limit({}, files) == 1 << 29
    v2.write_text("max\n")  # v2 is read first: no limit
    assert detect_memory_limit({}, files) is None
    v2.write_text("805306368\n")
    assert detect_memory_limit({}, files) == 805306368


def test_the_budget_admits_by_cost_over_what_the_process_holds() -> None:
    resident = [300 << 20]
    budget = MemoryBudget(1000 << 20, 0.5, resident=lambda: resident[0], trim=lambda: None)

    async def scenario() -> None:
        assert budget.capacity() == 200 << 20  # half of 1000 MiB, less the 300 MiB the process holds
        first, second, third = Charge(), Charge(), Charge()
        assert await budget.acquire(first, 150 << 20, 1.0)
        assert not await budget.acquire(second, 100 << 20, 0.2)  # would pass 500 MiB: it waits, then is busy
        resident[0] = 420 << 20  # the first review's objects, 120 of its 150 MiB
        assert budget.capacity() == 200 << 20  # what it is charged is not counted twice
        waiter = asyncio.ensure_future(budget.acquire(second, 100 << 20, 2.0))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        resident[0] = 300 << 20
        await budget.release(first)
        assert await waiter and budget.charged == 100 << 20
        resident[0] = 460 << 20  # the cache grew 60 MiB while the second review runs
        assert budget.capacity() == 140 << 20
        assert not await budget.acquire(third, 50 << 20, 0.1)
        await budget.release(second)
        assert budget.charged == 0 and budget.running == 0

    asyncio.run(scenario())


def test_a_review_past_its_deadline_keeps_its_charge_until_its_rule_ends(tmp_path: Path) -> None:
    from gpuctl.operator.server import Limits
    from tests.unit.test_operator_server import Fixed as Slow
    from tests.unit.test_operator_server import request, review, start

    srv, ca, _ = start(tmp_path, contexts=Slow(delay=2.0), limits=Limits(deadline=0.5))
    try:
        accept = next(e for e in EXAMPLES if e.id == "rule2-accept")
        answer_ = json.loads(request(srv, ca, "POST", "/mutate-pod-accelerators", review(accept.pod))[1])["response"]
        assert "no answer within" in answer_["status"]["message"]
        assert srv.budget.charged > 0  # the rule still runs: its memory is still spent
        deadline = time.monotonic() + 5
        while srv.budget.charged and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.budget.charged == 0 and srv.budget.running == 0
    finally:
        srv.shutdown()


# ----------------------------------------------------------------------------------------------- the operator


def test_with_a_5000_node_cache_the_worst_mix_keeps_the_operator_under_60_percent_of_its_limit(
    tmp_path: Path,
) -> None:
    result = measure(tmp_path)
    sent = sum(result.outcomes.values()) + len(result.failures)
    assert sent == 2 * len(MIX) and not result.failures, result.failures[:3]
    assert result.exit_code is None, "the operator died under the reviews"
    assert result.baseline > 80 << 20, "the 5,000-node cache is loaded"
    assert result.fraction < 0.6, f"peak {result.peak >> 20} MiB of {LIMIT >> 20} MiB"
    # Not by refusing everything: the reviews that fit were judged, the others answered as retryable or too costly.
    assert result.outcomes.get("judged", 0) >= len(SHAPES), result.outcomes
    assert set(result.outcomes) <= {"judged", "busy", "too costly"}, result.outcomes

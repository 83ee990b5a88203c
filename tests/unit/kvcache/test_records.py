"""The KV cache objects read into records: every field, and any object at all."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpuctl.core.kvcache.records import parse_kvcache_backend, parse_kvcache_pool, parse_kvcache_pool_binding
from tests.unit.kvcache.builders import (
    ENDPOINT,
    binding_object,
    pool_object,
)

# ----------------------------------------------------------------------------------------------- records


def test_records_read_their_fields() -> None:
    b = parse_kvcache_pool_binding(binding_object(deleting=True))
    assert (b.namespace, b.name, b.pool, b.domain, b.dtype, b.deleting) == (
        "team-a",
        "chat",
        "shared-dram",
        "team-a-chat",
        "fp8_e4m3",
        True,
    )
    mixed: Any = ["Auto", "RDMA", "rdma", "CANN", "nvlink", 7]
    p = parse_kvcache_pool(pool_object(transports=mixed))
    assert p.transports == ("tcp", "rdma", "ascend", "nvlink")
    assert (p.backends, p.client_endpoint) == (("mooncake-dram",), ENDPOINT)
    assert p.ledger is not None and (p.ledger.status, p.ledger.reason) == ("True", "LedgerObserved")
    odd = parse_kvcache_pool(pool_object(ledger=("Maybe", "", "")))
    assert odd.ledger is not None and odd.ledger.status == "Unknown"


RECORD_OBJECTS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(["metadata", "spec", "status", "name"]), c),
    max_leaves=15,
)


@given(RECORD_OBJECTS)
def test_record_parsers_read_any_object(obj: Any) -> None:
    mapping = obj if isinstance(obj, dict) else {"spec": obj}
    assert parse_kvcache_pool_binding(mapping).domain
    assert isinstance(parse_kvcache_pool(mapping).transports, tuple)
    assert isinstance(parse_kvcache_backend(mapping).name, str)

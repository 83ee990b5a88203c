"""The pool behind the Binding: every refusal on the way from the Binding to the transport, and what a pool decides."""

from __future__ import annotations

from gpuctl.core.kvcache.keys import (
    ANNOTATION_BINDING,
    ANNOTATION_MANUFACTURER,
)
from tests.unit.kvcache.builders import (
    SGLANG_SERVER,
    admit,
    admitted,
    annotation,
    binding_object,
    container_of,
    context,
    env_of,
    file_config,
    kv_pod,
    pool_object,
    record,
    refused,
    server,
)

# ----------------------------------------------------------------------------------------------- the pool behind it


BINDING_PATH = annotation(ANNOTATION_BINDING)


def test_a_missing_binding_is_refused() -> None:
    assert refused(kv_pod(binding="nope")) == (
        f'{BINDING_PATH}: Invalid value: "nope": no KVCachePoolBinding "nope" exists in namespace "team-a"; create '
        "the Binding, or fix the name"
    )


def test_a_binding_in_another_namespace_does_not_count() -> None:
    assert "exists in namespace" in refused(kv_pod(), context([binding_object(namespace="team-b")]))


def test_the_request_namespace_is_used_when_the_pod_names_none() -> None:
    assert admit(kv_pod(namespace=None), context(request_namespace="team-a")).allowed
    assert 'namespace "team-b"' in refused(kv_pod(namespace=None), context(request_namespace="team-b"))


def test_a_binding_being_deleted_is_refused() -> None:
    assert refused(kv_pod(), context([binding_object(deleting=True)])) == (
        f'{BINDING_PATH}: Invalid value: "chat": KVCachePoolBinding team-a/chat is being deleted: its reuse domain '
        "is being withdrawn from the ledger, so every write would fail with TENANT_NOT_REGISTERED; wait for the "
        "deletion to finish and create a new Binding, or name one that is not terminating"
    )


def test_a_binding_without_a_pool_reference_is_refused() -> None:
    assert refused(kv_pod(), context([binding_object(pool=None)])) == (
        f'{BINDING_PATH}: Invalid value: "chat": KVCachePoolBinding team-a/chat names no pool (spec.poolRef.name); '
        "fix the Binding's poolRef"
    )


def test_a_missing_pool_is_refused() -> None:
    assert refused(kv_pod(), context(pools=[])) == (
        f'{BINDING_PATH}: Invalid value: "chat": KVCachePoolBinding team-a/chat references KVCachePool '
        '"shared-dram", which does not exist; fix the Binding\'s spec.poolRef, or create the pool'
    )


def test_a_missing_backend_is_refused() -> None:
    assert refused(kv_pod(), context(backends=[])) == (
        f'{BINDING_PATH}: Invalid value: "chat": KVCachePool shared-dram references KVCacheBackend "mooncake-dram", '
        "which does not exist; fix the pool's spec.backends, or create the backend"
    )
    assert "names no KVCacheBackend" in refused(kv_pod(), context(pools=[pool_object(backends=[])]))


def test_an_unreported_ledger_is_refused() -> None:
    assert refused(kv_pod(), context(pools=[pool_object(ledger=None)])) == (
        f'{BINDING_PATH}: Invalid value: "chat": KVCachePool shared-dram has not reported QuotaLedgerAvailable yet; '
        "wait for the pool to report it"
    )


def test_an_unknown_ledger_is_refused() -> None:
    ctx = context(pools=[pool_object(ledger=("Unknown", "Probing", ""))])
    assert refused(kv_pod(), ctx) == (
        f'{BINDING_PATH}: Invalid value: "chat": KVCachePool shared-dram reports QuotaLedgerAvailable=Unknown '
        "(Probing); wait until the pool has observed its master's tenant ledger"
    )


def test_an_unavailable_ledger_is_refused_with_the_controllers_reason() -> None:
    ctx = context(pools=[pool_object(ledger=("False", "LedgerUnreachable", "GET /tenants: connection refused"))])
    assert refused(kv_pod(), ctx) == (
        f'{BINDING_PATH}: Invalid value: "chat": KVCachePool shared-dram reports QuotaLedgerAvailable=False '
        "(LedgerUnreachable: GET /tenants: connection refused); restore the master and its tenant ledger, then "
        "re-create the Pod"
    )


def test_a_single_tenant_store_is_injected_with_no_tenant() -> None:
    ctx = context(pools=[pool_object(ledger=("False", "MultiTenancyDisabled", "serves one reuse domain"))])
    vllm = admitted(kv_pod(), ctx)
    assert "tenant_id" not in file_config(vllm)
    assert record(vllm)["tenantInjected"] is False
    assert record(vllm)["domain"] == "team-a-chat"
    c = server(*SGLANG_SERVER, env=[{"name": "MOONCAKE_TENANT_ID", "value": "mine"}])
    sglang = admitted(kv_pod(engine="SGLang", containers=[c]), ctx)
    assert env_of(sglang)["MOONCAKE_TENANT_ID"] == "mine"
    assert record(sglang)["tenantInjected"] is False


def test_a_binding_without_a_domain_name_registers_default() -> None:
    mutated = admitted(kv_pod(), context([binding_object(domain=None)]))
    assert file_config(mutated)["tenant_id"] == "default"
    assert record(mutated)["domain"] == "default"


def test_a_pool_without_a_client_endpoint_is_refused() -> None:
    assert refused(kv_pod(), context(pools=[pool_object(endpoint=None)])) == (
        f'{BINDING_PATH}: Invalid value: "chat": KVCachePool shared-dram has published no client endpoint yet; wait '
        "for the pool to report status.clientEndpoint"
    )


def test_a_binding_without_a_dtype_is_refused_while_the_dtype_is_owned() -> None:
    ctx = context([binding_object(dtype=None)])
    assert refused(kv_pod(), ctx) == (
        f'{BINDING_PATH}: Invalid value: "chat": KVCachePoolBinding team-a/chat declares no spec.domain.dtype, so '
        "the engine cannot be given the domain's --kv-cache-dtype; name a Binding that declares one"
    )
    owned_off = context([binding_object(dtype=None)], kv_cache_dtype_owned=False)
    assert "--kv-cache-dtype" not in container_of(admitted(kv_pod(), owned_off))["args"]


def test_vllm_ascend_refuses_a_pool_without_the_ascend_transport() -> None:
    assert refused(kv_pod({ANNOTATION_MANUFACTURER: "ascend"})) == (
        f'{BINDING_PATH}: Invalid value: "chat": KVCachePool shared-dram offers tcp, but vLLM-Ascend accepts only '
        "ascend; pair it with a pool offering CANN: set spec.transport.protocol: CANN on the pool's backend, or "
        "transport.protocol: CANN on the member group serving those nodes"
    )


def test_a_mixed_pool_is_refused_for_an_engine_without_a_required_transport() -> None:
    ctx = context(pools=[pool_object(transports=["TCP", "RDMA"])])
    assert refused(kv_pod(), ctx) == (
        f'{BINDING_PATH}: Invalid value: "chat": KVCachePool shared-dram offers 2 transports (rdma, tcp) and vLLM '
        "declares no required transport, so it would be configured with one and fail with NotSupportedTransport "
        "reading a block held by another group; make the member groups use one protocol, or name a Binding on "
        "another pool"
    )
    assert "SGLang declares no required transport" in refused(kv_pod(engine="SGLang"), ctx)


def test_groups_sharing_one_transport_are_one_offer() -> None:
    ctx = context(pools=[pool_object(transports=["RDMA", "rdma"])])
    assert env_of(admitted(kv_pod(engine="SGLang"), ctx))["MOONCAKE_PROTOCOL"] == "rdma"


def test_a_pool_publishing_no_transport_is_refused() -> None:
    assert "publishes no member-group transport (status.transports) yet" in refused(
        kv_pod(), context(pools=[pool_object(transports=[])])
    )


def test_auto_resolves_to_tcp() -> None:
    assert file_config(admitted(kv_pod(), context(pools=[pool_object(transports=["Auto"])])))["protocol"] == "tcp"

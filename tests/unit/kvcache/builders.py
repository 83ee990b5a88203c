"""Builders shared by the KV cache webhook tests: the KV cache objects, a context holding them, Pods and containers,
and readers of what the webhook wrote."""

from __future__ import annotations

import json
from typing import Any

from gpuctl.core.admission import Admission, apply_patch, json_patch
from gpuctl.core.kvcache.keys import (
    ANNOTATION_BINDING,
    ANNOTATION_CLIENT_CONFIG,
    ANNOTATION_ENGINE,
    ANNOTATION_INJECTED,
    LABEL_INJECT,
)
from gpuctl.core.kvcache.records import (
    KVCacheContext,
    parse_kvcache_backend,
    parse_kvcache_pool,
    parse_kvcache_pool_binding,
)
from gpuctl.core.kvcache.webhooks import admit_kvcache_pod

JSON = dict[str, Any]
ENDPOINT = "mooncake-dram-leader.gpustack-system.svc:50051"


def binding_object(
    name: str = "chat",
    namespace: str = "team-a",
    pool: str | None = "shared-dram",
    domain: str | None = "team-a-chat",
    dtype: str | None = "fp8_e4m3",
    deleting: bool = False,
) -> JSON:
    metadata: JSON = {"name": name, "namespace": namespace}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    domain_spec: JSON = {"blockSize": 64}
    if domain is not None:
        domain_spec["name"] = domain
    if dtype is not None:
        domain_spec["dtype"] = dtype
    spec: JSON = {"quota": {"ceiling": "600Gi"}, "domain": domain_spec}
    if pool is not None:
        spec["poolRef"] = {"name": pool}
    return {
        "apiVersion": "kvcache.gpustack.ai/v1alpha1",
        "kind": "KVCachePoolBinding",
        "metadata": metadata,
        "spec": spec,
    }


LEDGER_TRUE: tuple[str, str, str] | None = ("True", "LedgerObserved", "")


def pool_object(
    name: str = "shared-dram",
    backends: list[str] | None = None,
    endpoint: str | None = ENDPOINT,
    transports: list[str] | None = None,
    ledger: tuple[str, str, str] | None = LEDGER_TRUE,
) -> JSON:
    status: JSON = {"transports": ["TCP"] if transports is None else transports}
    if endpoint is not None:
        status["clientEndpoint"] = endpoint
    if ledger is not None:
        kind, reason, message = ledger
        status["conditions"] = [
            {"type": "Ready", "status": "True"},
            {"type": "QuotaLedgerAvailable", "status": kind, "reason": reason, "message": message},
        ]
    return {
        "apiVersion": "kvcache.gpustack.ai/v1alpha1",
        "kind": "KVCachePool",
        "metadata": {"name": name},
        "spec": {"backends": ["mooncake-dram"] if backends is None else backends, "quota": {"total": "900Gi"}},
        "status": status,
    }


def context(
    bindings: list[JSON] | None = None,
    pools: list[JSON] | None = None,
    backends: list[str] | None = None,
    **settings_: Any,
) -> KVCacheContext:
    return KVCacheContext.of(
        [parse_kvcache_pool_binding(b) for b in ([binding_object()] if bindings is None else bindings)],
        [parse_kvcache_pool(p) for p in ([pool_object()] if pools is None else pools)],
        [
            parse_kvcache_backend({"metadata": {"name": n}})
            for n in (["mooncake-dram"] if backends is None else backends)
        ],
        **settings_,
    )


def server(
    command: list[str] | None = None,
    args: list[str] | None = None,
    name: str = "server",
    **extra: Any,
) -> JSON:
    c: JSON = {"name": name, "image": "vllm/vllm-openai:v0.29.0"}
    if command is not None:
        c["command"] = command
    if args is not None:
        c["args"] = args
    c.update(extra)
    return c


Launch = tuple[list[str], list[str]]
VLLM_SERVER: Launch = (["vllm"], ["serve", "--model", "Qwen/Qwen3-8B"])
SGLANG_SERVER: Launch = (["python3", "-m", "sglang.launch_server"], ["--model-path", "Qwen/Qwen3-8B"])


def kv_pod(
    annotations: dict[str, Any] | None = None,
    containers: list[JSON] | None = None,
    *,
    engine: str | None = "vLLM",
    binding: str | None = "chat",
    labels: dict[str, str] | None = None,
    namespace: str | None = "team-a",
    **spec_extra: Any,
) -> JSON:
    notes: dict[str, Any] = {}
    if binding is not None:
        notes[ANNOTATION_BINDING] = binding
    if engine is not None:
        notes[ANNOTATION_ENGINE] = engine
    notes.update(annotations or {})
    if containers is None:
        containers = [server(*(SGLANG_SERVER if engine and engine.lower() == "sglang" else VLLM_SERVER))]
    metadata: JSON = {"name": "chat-0", "labels": {LABEL_INJECT: "true"} if labels is None else labels}
    if namespace is not None:
        metadata["namespace"] = namespace
    if notes:
        metadata["annotations"] = notes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": containers, **spec_extra}}


def admit(pod: JSON, ctx: KVCacheContext | None = None) -> Admission:
    return admit_kvcache_pod(pod, context() if ctx is None else ctx)


def admitted(pod: JSON, ctx: KVCacheContext | None = None) -> JSON:
    result = admit(pod, ctx)
    assert result.allowed, result.message
    assert result.mutated is not None
    assert apply_patch(pod, json_patch(pod, result.mutated)) == result.mutated
    return result.mutated


def refused(pod: JSON, ctx: KVCacheContext | None = None) -> str:
    result = admit(pod, ctx)
    assert not result.allowed
    assert result.message
    return result.message


def record(mutated: JSON) -> JSON:
    value: JSON = json.loads(mutated["metadata"]["annotations"][ANNOTATION_INJECTED])
    return value


def file_config(mutated: JSON) -> JSON:
    value: JSON = json.loads(mutated["metadata"]["annotations"][ANNOTATION_CLIENT_CONFIG])
    return value


def container_of(mutated: JSON, index: int = 0) -> JSON:
    c: JSON = mutated["spec"]["containers"][index]
    return c


def env_of(mutated: JSON, index: int = 0) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container_of(mutated, index).get("env", [])}


def annotation(key: str) -> str:
    return f"metadata.annotations[{key}]"

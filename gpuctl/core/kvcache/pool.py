"""The target pool: the Binding a Pod names, its pool and backend, whether the pool's tenant ledger lets a tenant be
injected, and the transport the engine is configured with; refused at the first that fails."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from gpuctl.core.admission import invalid
from gpuctl.core.kvcache.engines import FLAG_KV_CACHE_DTYPE, Engine
from gpuctl.core.kvcache.keys import ANNOTATION_BINDING, annotation_path
from gpuctl.core.kvcache.records import (
    CONDITION_LEDGER,
    REASON_MULTI_TENANCY_DISABLED,
    TRANSPORT_TO_API,
    Condition,
    KVCacheContext,
    KVCachePool,
    KVCachePoolBinding,
)
from gpuctl.core.kvcache.request import InjectionRequest, Refused


@dataclass(frozen=True, slots=True)
class Target:
    """What the injection writes from: the Binding, its pool, the transport, and the tenant (None: inject none)."""

    binding: KVCachePoolBinding
    pool: KVCachePool
    protocol: str
    tenant: str | None


def _refuse(binding_name: str, detail: str) -> Refused:
    return Refused(invalid(annotation_path(ANNOTATION_BINDING), binding_name, detail))


def find_binding(name: str, namespace: str, context: KVCacheContext) -> KVCachePoolBinding | Refused:
    binding = context.bindings.get((namespace, name))
    if binding is None:
        return _refuse(
            name,
            f"no KVCachePoolBinding {json.dumps(name)} exists in namespace {json.dumps(namespace)}; create the "
            "Binding, or fix the name",
        )
    if binding.deleting:
        return _refuse(
            name,
            f"KVCachePoolBinding {namespace}/{name} is being deleted: its reuse domain is being withdrawn from the "
            "ledger, so every write would fail with TENANT_NOT_REGISTERED; wait for the deletion to finish and create "
            "a new Binding, or name one that is not terminating",
        )
    return binding


def find_pool(binding: KVCachePoolBinding, context: KVCacheContext) -> KVCachePool | Refused:
    """The Binding's pool, provided it and its backend exist."""
    where = f"KVCachePoolBinding {binding.namespace}/{binding.name}"
    if not binding.pool:
        return _refuse(binding.name, f"{where} names no pool (spec.poolRef.name); fix the Binding's poolRef")
    pool = context.pools.get(binding.pool)
    if pool is None:
        return _refuse(
            binding.name,
            f"{where} references KVCachePool {json.dumps(binding.pool)}, which does not exist; fix the Binding's "
            "spec.poolRef, or create the pool",
        )
    if not pool.backends:
        return _refuse(binding.name, f"KVCachePool {pool.name} names no KVCacheBackend (spec.backends); fix the pool")
    missing = [b for b in pool.backends if b not in context.backends]
    if missing:
        return _refuse(
            binding.name,
            f"KVCachePool {pool.name} references KVCacheBackend {json.dumps(missing[0])}, which does not exist; fix "
            "the pool's spec.backends, or create the backend",
        )
    return pool


def _condition_text(pool: KVCachePool, ledger: Condition) -> str:
    said = f"KVCachePool {pool.name} reports {CONDITION_LEDGER}={ledger.status}"
    if ledger.reason and ledger.message:
        return f"{said} ({ledger.reason}: {ledger.message})"
    return f"{said} ({ledger.reason or ledger.message})" if ledger.reason or ledger.message else said


def ledger_tenant(binding: KVCachePoolBinding, pool: KVCachePool) -> str | Refused | None:
    """The tenant id to inject (the Binding's domain), None for a declared single-tenant store."""
    ledger = pool.ledger
    if ledger is None:
        return _refuse(
            binding.name,
            f"KVCachePool {pool.name} has not reported {CONDITION_LEDGER} yet; wait for the pool to report it",
        )
    if ledger.status == "True":
        return binding.domain
    if ledger.status == "False" and ledger.reason == REASON_MULTI_TENANCY_DISABLED:
        return None
    said = _condition_text(pool, ledger)
    if ledger.status == "Unknown":
        return _refuse(binding.name, f"{said}; wait until the pool has observed its master's tenant ledger")
    return _refuse(binding.name, f"{said}; restore the master and its tenant ledger, then re-create the Pod")


def _listed(transports: Iterable[str]) -> str:
    return ", ".join(sorted(transports))


def pool_protocol(binding: KVCachePoolBinding, pool: KVCachePool, engine: Engine) -> str | Refused:
    """The transport the engine is configured with: the one it requires, or the pool's only one."""
    offered = pool.transports
    head = f"KVCachePool {pool.name}"
    if not offered:
        return _refuse(
            binding.name,
            f"{head} publishes no member-group transport (status.transports) yet; wait for the pool to report it",
        )
    needed = engine.required_transport
    if needed is not None:
        if needed in offered:
            return needed
        api = TRANSPORT_TO_API[needed]
        return _refuse(
            binding.name,
            f"{head} offers {_listed(offered)}, but {engine.display_name} accepts only {needed}; pair it with a pool offering "
            f"{api}: set spec.transport.protocol: {api} on the pool's backend, or transport.protocol: {api} on the "
            "member group serving those nodes",
        )
    if len(offered) > 1:
        return _refuse(
            binding.name,
            f"{head} offers {len(offered)} transports ({_listed(offered)}) and {engine.display_name} declares no required "
            "transport, so it would be configured with one and fail with NotSupportedTransport reading a block held "
            "by another group; make the member groups use one protocol, or name a Binding on another pool",
        )
    return offered[0]


def _dtype_refusal(binding: KVCachePoolBinding) -> Refused:
    return _refuse(
        binding.name,
        f"KVCachePoolBinding {binding.namespace}/{binding.name} declares no spec.domain.dtype, so the engine cannot be "
        f"given the domain's {FLAG_KV_CACHE_DTYPE}; name a Binding that declares one",
    )


def resolve_target(request: InjectionRequest, namespace: str, context: KVCacheContext) -> Target | Refused:
    """Binding → pool → backend → ledger → endpoint → dtype → transport, refusing at the first that fails."""
    binding = find_binding(request.binding, namespace, context)
    if isinstance(binding, Refused):
        return binding
    pool = find_pool(binding, context)
    if isinstance(pool, Refused):
        return pool
    tenant = ledger_tenant(binding, pool)
    if isinstance(tenant, Refused):
        return tenant
    if not pool.client_endpoint:
        return _refuse(
            binding.name,
            f"KVCachePool {pool.name} has published no client endpoint yet; wait for the pool to report "
            "status.clientEndpoint",
        )
    if context.kv_cache_dtype_owned and not binding.dtype:
        return _dtype_refusal(binding)
    protocol = pool_protocol(binding, pool, request.engine)
    if isinstance(protocol, Refused):
        return protocol
    return Target(binding, pool, protocol, tenant)

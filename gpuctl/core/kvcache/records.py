"""The KV cache objects the webhook reads (``KVCachePoolBinding``, ``KVCachePool``, ``KVCacheBackend``) as frozen
records, their parsers, and the context the mutating rule looks them up in.

The objects are plain JSON parsed once, at the boundary; every field is optional to the parser, and a missing or
mistyped field reads as its "absent" value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

API_GROUP: Final = "kvcache.gpustack.ai"
API_VERSION: Final = "v1alpha1"

CONDITION_LEDGER: Final = "QuotaLedgerAvailable"
REASON_MULTI_TENANCY_DISABLED: Final = "MultiTenancyDisabled"
DEFAULT_DOMAIN: Final = "default"

# Transport spellings: the API's enum (backend ``spec.transport.protocol``) and the store's (``protocol`` / the
# ``MOONCAKE_PROTOCOL`` variable). ``Auto`` resolves to the store's ``tcp``.
TRANSPORT_FROM_API: Final[Mapping[str, str]] = {
    "Auto": "tcp",
    "TCP": "tcp",
    "RDMA": "rdma",
    "EFA": "efa",
    "CANN": "ascend",
}
TRANSPORT_TO_API: Final[Mapping[str, str]] = {"tcp": "TCP", "rdma": "RDMA", "efa": "EFA", "ascend": "CANN"}


def as_mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


def as_text(value: Any) -> str:
    """``value`` when it is a string, else ``""``."""
    return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class KVCachePoolBinding:
    """The parts of a ``KVCachePoolBinding`` (namespaced) the webhook reads."""

    namespace: str
    name: str
    pool: str
    """``spec.poolRef.name``; empty when absent."""
    domain: str
    """``spec.domain.name``, the reuse domain and the store's tenant id; ``default`` when absent or empty."""
    dtype: str
    """``spec.domain.dtype``, handed to the engine verbatim; empty when absent."""
    deleting: bool
    """``metadata.deletionTimestamp`` is set."""


@dataclass(frozen=True, slots=True)
class Condition:
    status: str
    """``True``, ``False`` or ``Unknown`` (any other value reads as ``Unknown``)."""
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class KVCachePool:
    """The parts of a ``KVCachePool`` (cluster-scoped) the webhook reads."""

    name: str
    backends: tuple[str, ...]
    """``spec.backends``: the KVCacheBackend names (the API allows exactly one)."""
    client_endpoint: str
    """``status.clientEndpoint``; empty while the pool has published none."""
    transports: tuple[str, ...]
    """``status.transports``: the effective transport of each member group, in the store's spelling, deduplicated."""
    ledger: Condition | None
    """The ``QuotaLedgerAvailable`` condition, or None when the pool has not reported it."""


@dataclass(frozen=True, slots=True)
class KVCacheBackend:
    """A ``KVCacheBackend`` (cluster-scoped): the webhook only needs to know that it exists."""

    name: str


def parse_kvcache_pool_binding(obj: Mapping[str, Any]) -> KVCachePoolBinding:
    metadata = as_mapping(obj.get("metadata"))
    spec = as_mapping(obj.get("spec"))
    domain = as_mapping(spec.get("domain"))
    return KVCachePoolBinding(
        namespace=as_text(metadata.get("namespace")),
        name=as_text(metadata.get("name")),
        pool=as_text(as_mapping(spec.get("poolRef")).get("name")),
        domain=as_text(domain.get("name")) or DEFAULT_DOMAIN,
        dtype=as_text(domain.get("dtype")),
        deleting=bool(metadata.get("deletionTimestamp")),
    )


def parse_transport(value: Any) -> str:
    """A transport in the store's spelling: API values are translated, anything else kept verbatim ('' if no string)."""
    text = as_text(value)
    return TRANSPORT_FROM_API.get(text, text)


def parse_condition(conditions: Any, kind: str) -> Condition | None:
    for entry in as_list(conditions):
        entry = as_mapping(entry)
        if entry.get("type") == kind:
            status = as_text(entry.get("status"))
            return Condition(
                status=status if status in ("True", "False") else "Unknown",
                reason=as_text(entry.get("reason")),
                message=as_text(entry.get("message")),
            )
    return None


def parse_kvcache_pool(obj: Mapping[str, Any]) -> KVCachePool:
    metadata = as_mapping(obj.get("metadata"))
    spec = as_mapping(obj.get("spec"))
    status = as_mapping(obj.get("status"))
    transports = (parse_transport(t) for t in as_list(status.get("transports")))
    return KVCachePool(
        name=as_text(metadata.get("name")),
        backends=tuple(b for b in (as_text(x) for x in as_list(spec.get("backends"))) if b),
        client_endpoint=as_text(status.get("clientEndpoint")),
        transports=tuple(dict.fromkeys(t for t in transports if t)),
        ledger=parse_condition(status.get("conditions"), CONDITION_LEDGER),
    )


def parse_kvcache_backend(obj: Mapping[str, Any]) -> KVCacheBackend:
    return KVCacheBackend(name=as_text(as_mapping(obj.get("metadata")).get("name")))


@dataclass(frozen=True, slots=True)
class KVCacheContext:
    """What the mutating rule looks up: Bindings by (namespace, name), pools and backends by name, and settings."""

    bindings: Mapping[tuple[str, str], KVCachePoolBinding] = field(default_factory=dict)
    pools: Mapping[str, KVCachePool] = field(default_factory=dict)
    backends: Mapping[str, KVCacheBackend] = field(default_factory=dict)
    request_namespace: str = ""
    """The AdmissionReview's ``request.namespace``, used when the Pod's ``metadata.namespace`` is empty."""
    kv_cache_dtype_owned: bool = True
    """The Setting ``model-deployment-kv-cache-dtype-owned``: render the Binding's dtype and refuse the engine's own."""

    @classmethod
    def of(
        cls,
        bindings: Iterable[KVCachePoolBinding] = (),
        pools: Iterable[KVCachePool] = (),
        backends: Iterable[KVCacheBackend] = (),
        *,
        request_namespace: str = "",
        kv_cache_dtype_owned: bool = True,
    ) -> KVCacheContext:
        return cls(
            bindings={(b.namespace, b.name): b for b in bindings},
            pools={p.name: p for p in pools},
            backends={b.name: b for b in backends},
            request_namespace=request_namespace,
            kv_cache_dtype_owned=kv_cache_dtype_owned,
        )

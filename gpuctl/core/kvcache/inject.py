"""The injection: what is written into the Pod for the resolved target (connector arguments, the engine's variables,
the vLLM family's client configuration file and its volume, and the injection record), and writing it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from gpuctl.core.admission import JSON, deep_copy
from gpuctl.core.kvcache.engines import (
    CONFIG_FILE,
    CONFIG_PATH,
    CONNECTORS,
    ENV_CONFIG_PATH,
    FLAG_HICACHE_BACKEND,
    FLAG_HIERARCHICAL_CACHE,
    FLAG_KV_CACHE_DTYPE,
    FLAG_KV_TRANSFER_CONFIG,
    HIERARCHICAL_CACHE,
    KV_ROLES,
    MOUNT_PATH,
    VOLUME_NAME,
    Engine,
    Family,
    OwnedFlag,
    names_flag,
)
from gpuctl.core.kvcache.keys import ANNOTATION_CLIENT_CONFIG, ANNOTATION_INJECTED
from gpuctl.core.kvcache.launch import LaunchVerdict
from gpuctl.core.kvcache.pool import Target
from gpuctl.core.kvcache.records import as_mapping
from gpuctl.core.kvcache.request import InjectionRequest

METADATA_SERVER: Final = "P2PHANDSHAKE"
LOCAL_BUFFER_SIZE: Final = 128 * 1024 * 1024
GLOBAL_SEGMENT_SIZE: Final = 0
METRIC_ENV: Final = ("MC_TE_METRIC", "MC_STORE_CLIENT_METRIC_BANDWIDTH")


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def client_config(target: Target) -> JSON:
    """The vLLM family's ``mooncake.json``: every key written, none left to a default."""
    config: JSON = {
        "master_server_address": target.pool.client_endpoint,
        "metadata_server": METADATA_SERVER,
        "protocol": target.protocol,
        "device_name": "",
        "global_segment_size": GLOBAL_SEGMENT_SIZE,
        "local_buffer_size": LOCAL_BUFFER_SIZE,
        "mode": "standalone-store",
    }
    if target.tenant is not None:
        config["tenant_id"] = target.tenant
    return config


def kv_transfer_config(engine: Engine, role: str | None) -> JSON:
    return {"kv_connector": CONNECTORS[engine], "kv_role": KV_ROLES[role]}


def _env(name: str, value: str) -> JSON:
    return {"name": name, "value": value}


def sglang_env(target: Target) -> list[JSON]:
    """SGLang's ``MOONCAKE_*`` variables; each overwrites a declaration of the same name in place."""
    env = [
        _env("MOONCAKE_MASTER", target.pool.client_endpoint),
        _env("MOONCAKE_TE_META_DATA_SERVER", METADATA_SERVER),
        _env("MOONCAKE_PROTOCOL", target.protocol),
        _env("MOONCAKE_DEVICE", ""),
        _env("MOONCAKE_GLOBAL_SEGMENT_SIZE", str(GLOBAL_SEGMENT_SIZE)),
        {"name": "MOONCAKE_LOCAL_HOSTNAME", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    if target.tenant is not None:
        env.append(_env("MOONCAKE_TENANT_ID", target.tenant))
    return env


def _has_flag(argv: Iterable[str], flag: OwnedFlag, family: Family) -> bool:
    return any(isinstance(t, str) and names_flag(t, flag, family) for t in argv)


@dataclass(frozen=True, slots=True)
class Injection:
    """Everything written into the Pod."""

    args: tuple[str, ...]
    env: tuple[JSON, ...]
    """Written in place over a declaration of the same name (appended when there is none)."""
    env_defaults: tuple[JSON, ...]
    """Written only when the container does not set the name."""
    client_config: str | None
    """The vLLM family's file payload, projected from the ``client-config`` annotation; None on SGLang."""
    record: str


def plan_injection(
    request: InjectionRequest, target: Target, verdict: LaunchVerdict, argv: Sequence[str], dtype_owned: bool
) -> Injection:
    engine = request.engine
    dtype = [FLAG_KV_CACHE_DTYPE, target.binding.dtype] if dtype_owned else []
    if engine.family is Family.VLLM:
        args = [FLAG_KV_TRANSFER_CONFIG, compact(kv_transfer_config(engine, request.role)), *dtype]
        env = [_env(ENV_CONFIG_PATH, CONFIG_PATH)]
        config: str | None = compact(client_config(target))
    else:
        args = [FLAG_HICACHE_BACKEND, "mooncake", *dtype]
        if not _has_flag(argv, HIERARCHICAL_CACHE, Family.SGLANG):
            args.append(FLAG_HIERARCHICAL_CACHE)
        env = sglang_env(target)
        config = None
    record = {
        "binding": request.binding,
        "engine": engine.value,
        "vehicle": "file" if config is not None else "environment",
        "domain": target.binding.domain,
        "tenantInjected": target.tenant is not None,
        "launchProgram": verdict.program,
        "launchArgsForwarded": verdict.args_forwarded,
    }
    defaults = tuple(_env(name, "1") for name in METRIC_ENV)
    return Injection(tuple(args), tuple(env), defaults, config, compact(record))


def _write_env(entries: list[Any], injected: Iterable[JSON], defaults: Iterable[JSON]) -> None:
    """Overwrite each injected name in place (dropping later duplicates), append the rest, then unset defaults."""
    for var in injected:
        places = [i for i, e in enumerate(entries) if as_mapping(e).get("name") == var["name"]]
        if not places:
            entries.append(dict(var))
            continue
        entries[places[0]] = dict(var)
        for i in reversed(places[1:]):
            del entries[i]
    present = {as_mapping(e).get("name") for e in entries}
    entries.extend(dict(var) for var in defaults if var["name"] not in present)


def _write_file_vehicle(spec: JSON, container: JSON) -> None:
    spec.setdefault("volumes", []).append(
        {
            "name": VOLUME_NAME,
            "downwardAPI": {
                "items": [
                    {
                        "path": CONFIG_FILE,
                        "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_CLIENT_CONFIG}']"},
                    }
                ]
            },
        }
    )
    container.setdefault("volumeMounts", []).append({"name": VOLUME_NAME, "mountPath": MOUNT_PATH, "readOnly": True})


def apply_injection(pod: JSON, index: int, injection: Injection, append_to: Literal["command", "args"]) -> JSON:
    """A copy of the Pod with the injection written into container ``index``."""
    mutated = deep_copy(pod)
    spec: JSON = mutated["spec"]
    container: JSON = spec["containers"][index]
    container.setdefault(append_to, []).extend(injection.args)
    if container.get("env") is None:
        container["env"] = []
    _write_env(container["env"], injection.env, injection.env_defaults)
    metadata: JSON = mutated.setdefault("metadata", {})
    annotations: JSON = metadata.setdefault("annotations", {})
    if injection.client_config is not None:
        if container.get("volumeMounts") is None:
            container.pop("volumeMounts", None)
        if spec.get("volumes") is None:
            spec.pop("volumes", None)
        _write_file_vehicle(spec, container)
        annotations[ANNOTATION_CLIENT_CONFIG] = injection.client_config
    annotations[ANNOTATION_INJECTED] = injection.record
    return mutated

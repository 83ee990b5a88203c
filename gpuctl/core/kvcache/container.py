"""The container the injection configures: which one the Pod names, and every refusal about it (field shapes, the
launch check, keys the injection owns, the file vehicle's volume and mount)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from gpuctl.core.admission import JSON, forbidden, invalid, required
from gpuctl.core.kvcache.engines import (
    ENV_CONFIG_PATH,
    ENV_SGLANG_CONFIG_PATH,
    HICACHE_BACKEND,
    HICACHE_EXTRA_CONFIG,
    KV_CACHE_DTYPE,
    KV_TRANSFER_CONFIG,
    MOUNT_PATH,
    VOLUME_NAME,
    Engine,
    Family,
    OwnedFlag,
    names_flag,
)
from gpuctl.core.kvcache.keys import ANNOTATION_CONTAINER, LABEL_INJECT, annotation_path
from gpuctl.core.kvcache.launch import LaunchRefusal, LaunchVerdict, parse_launch
from gpuctl.core.kvcache.records import as_list, as_mapping, as_text
from gpuctl.core.kvcache.request import InjectionRequest, Refused


def _names(entries: Iterable[Any]) -> list[str]:
    return [name for e in entries if (name := as_text(as_mapping(e).get("name")))]


def select_container(spec: Mapping[str, Any], name: str | None) -> tuple[int, JSON] | Refused:
    """The app container the injection configures (its index and object)."""
    containers = as_list(spec.get("containers"))
    if not containers:
        return Refused(required("spec.containers", "a Pod must have at least one container"))
    names = ", ".join(_names(containers))
    path = annotation_path(ANNOTATION_CONTAINER)
    if name is None:
        if len(containers) == 1 and isinstance(containers[0], dict):
            return 0, containers[0]
        return Refused(
            required(
                path,
                f"the Pod has {len(containers)} containers ({names}) and none is named; the first is never chosen, so "
                "set it to the engine's container",
            )
        )
    for index, c in enumerate(containers):
        if isinstance(c, dict) and c.get("name") == name:
            return index, c
    if name in _names(as_list(spec.get("initContainers"))):
        return Refused(
            forbidden(
                path,
                f"names init container {json.dumps(name)}, which finishes before the workload starts, so configuring "
                f"it caches nothing; name an app container: {names}",
            )
        )
    return Refused(invalid(path, name, f"the Pod has no container of that name; name one of: {names}"))


def _string_list_error(path: str, value: Any) -> str | None:
    if value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return None
    return invalid(path, value, "must be a list of strings")


def _object_list_error(path: str, value: Any) -> str | None:
    if value is None or (isinstance(value, list) and all(isinstance(v, dict) for v in value)):
        return None
    return invalid(path, value, "must be a list of objects")


def container_shape_errors(path: str, container: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    """The fields the injection extends must have shapes it can extend."""
    checks = [
        _string_list_error(f"{path}.command", container.get("command")),
        _string_list_error(f"{path}.args", container.get("args")),
        _object_list_error(f"{path}.env", container.get("env")),
        _object_list_error(f"{path}.volumeMounts", container.get("volumeMounts")),
        _object_list_error("spec.volumes", spec.get("volumes")),
    ]
    return [e for e in checks if e is not None]


def launch_error(path: str, verdict: LaunchVerdict) -> str | None:
    if verdict.accepted:
        return None
    where = f"{path}.{verdict.field}"
    if verdict.refusal in (LaunchRefusal.NO_COMMAND, LaunchRefusal.ARGS_WITHOUT_COMMAND):
        return required(where, verdict.reason)
    return forbidden(where, verdict.reason)


def _argv_positions(path: str, container: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (f"{path}.{part}[{i}]", token)
        for part in ("command", "args")
        for i, token in enumerate(as_list(container.get(part)))
        if isinstance(token, str)
    ]


def _env_positions(path: str, container: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (f"{path}.env[{i}].name", as_text(as_mapping(e).get("name")))
        for i, e in enumerate(as_list(container.get("env")))
    ]


def _owned(engine: Engine) -> tuple[dict[OwnedFlag, str], dict[str, str]]:
    """The flags and variables refused on this engine, each with why (a predicate) and the fix."""
    configured = (
        f"is written by the KV cache injection for {engine.display_name}: the container already has a KV cache configured "
        f"and two sources for one setting cannot be diagnosed; remove yours, or drop the {LABEL_INJECT} label"
    )
    if engine.family is Family.VLLM:
        return {KV_TRANSFER_CONFIG: configured}, {ENV_CONFIG_PATH: configured}
    source = (
        "selects where SGLang reads its store configuration, leaving every injected MOONCAKE_* variable unread; "
        f"remove it, or drop the {LABEL_INJECT} label"
    )
    return {HICACHE_BACKEND: configured, HICACHE_EXTRA_CONFIG: source}, {ENV_SGLANG_CONFIG_PATH: source}


DTYPE_OWNED: Final = (
    "is set from the KVCachePoolBinding's spec.domain.dtype, so that every engine on one reuse domain writes one "
    "element type; remove yours and name a Binding that declares the dtype you want"
)


def _flag_error(where: str, token: str, flag: OwnedFlag, detail: str) -> str:
    if token == flag.name:
        return forbidden(where, f"{json.dumps(token)} {detail}")
    return forbidden(where, f"{json.dumps(token)} is read as {flag.name}, which {detail}")


def owned_key_errors(path: str, container: Mapping[str, Any], engine: Engine, dtype_owned: bool) -> list[str]:
    """Keys the injection writes or that would leave it unread: the engine's own, its config sources, the dtype."""
    flags, env = _owned(engine)
    if dtype_owned:
        flags[KV_CACHE_DTYPE] = DTYPE_OWNED
    errors = [
        _flag_error(where, token, flag, detail)
        for where, token in _argv_positions(path, container)
        for flag, detail in flags.items()
        if names_flag(token, flag, engine.family)
    ]
    errors += [
        forbidden(where, f"{name} {env[name]}") for where, name in _env_positions(path, container) if name in env
    ]
    return errors


def volume_errors(path: str, container: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    """Collisions with the volume name and mount path the vLLM family's file vehicle owns."""
    owned = f"{json.dumps(VOLUME_NAME)} is owned by the KV cache injection; rename yours"
    errors = [
        forbidden(f"spec.volumes[{i}].name", owned)
        for i, v in enumerate(as_list(spec.get("volumes")))
        if as_mapping(v).get("name") == VOLUME_NAME
    ]
    for i, m in enumerate(as_list(container.get("volumeMounts"))):
        mount = as_mapping(m)
        if mount.get("name") == VOLUME_NAME:
            errors.append(forbidden(f"{path}.volumeMounts[{i}].name", owned))
        if as_text(mount.get("mountPath")).rstrip("/") == MOUNT_PATH:
            errors.append(
                forbidden(
                    f"{path}.volumeMounts[{i}].mountPath",
                    f"{MOUNT_PATH} is where the KV cache injection mounts the client configuration; mount yours "
                    "elsewhere",
                )
            )
    return errors


def container_errors(
    path: str, container: Mapping[str, Any], spec: Mapping[str, Any], request: InjectionRequest, dtype_owned: bool
) -> tuple[LaunchVerdict | None, list[str]]:
    """The launch verdict and every refusal about the selected container."""
    shape = container_shape_errors(path, container, spec)
    if shape:
        return None, shape
    verdict = parse_launch(container.get("command"), container.get("args"), request.engine.value, request.forwarded)
    errors = [e for e in (launch_error(path, verdict),) if e is not None]
    errors += owned_key_errors(path, container, request.engine, dtype_owned)
    if request.engine.family is Family.VLLM:
        errors += volume_errors(path, container, spec)
    return verdict, errors

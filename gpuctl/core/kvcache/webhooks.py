"""The two webhook rules: the KV cache injection (Pod CREATE, mutating, ``failurePolicy: Fail``) and the freeze on what
it wrote (Pod UPDATE, validating, ``failurePolicy: Ignore``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from gpuctl.core.admission import JSON, Admission, aggregate, allow, deny, fail_closed, fail_open, forbidden, required
from gpuctl.core.kvcache.container import container_errors, select_container
from gpuctl.core.kvcache.engines import CONFIG_PATH
from gpuctl.core.kvcache.inject import apply_injection, plan_injection
from gpuctl.core.kvcache.keys import (
    ANNOTATION_CLIENT_CONFIG,
    ANNOTATION_INJECTED,
    LABEL_INJECT,
    annotation_path,
    label_path,
)
from gpuctl.core.kvcache.pool import resolve_target
from gpuctl.core.kvcache.records import KVCacheContext, as_list, as_mapping, as_text
from gpuctl.core.kvcache.request import Refused, read_request


def pod_namespace(metadata: Mapping[str, Any], context: KVCacheContext) -> str:
    return as_text(metadata.get("namespace")) or context.request_namespace or "default"


@fail_closed
def admit_kvcache_pod(pod: JSON, context: KVCacheContext) -> Admission:
    """The KV cache injection webhook (Pod CREATE, ``failurePolicy: Fail``)."""
    if not isinstance(pod, dict):
        return deny("the request object is not a Pod")
    metadata = as_mapping(pod.get("metadata"))
    if as_mapping(metadata.get("labels")).get(LABEL_INJECT) != "true":
        return allow(pod)
    request = read_request(as_mapping(metadata.get("annotations")))
    if isinstance(request, Refused):
        return deny(request.message)
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return deny(required("spec", "a Pod must have a spec"))
    selected = select_container(spec, request.container)
    if isinstance(selected, Refused):
        return deny(selected.message)
    index, container = selected
    verdict, errors = container_errors(
        f"spec.containers[{index}]", container, spec, request, context.kv_cache_dtype_owned
    )
    if errors or verdict is None:
        return deny(aggregate(errors))
    target = resolve_target(request, pod_namespace(metadata, context), context)
    if isinstance(target, Refused):
        return deny(target.message)
    argv = [*as_list(container.get("command")), *as_list(container.get("args"))]
    injection = plan_injection(request, target, verdict, argv, context.kv_cache_dtype_owned)
    return allow(
        apply_injection(pod, index, injection, verdict.append_to),
        changed=[("spec", "containers", index), ("spec", "volumes"), ("metadata", "annotations")],
    )


FROZEN_WHY: Final[Mapping[str, str]] = {
    LABEL_INJECT: (
        "injection runs only at CREATE, so a changed label would misstate whether this Pod uses a cache; change it "
        "on the workload's Pod template and let the workload roll"
    ),
    ANNOTATION_INJECTED: "it records what the webhook decided at CREATE; restore the value the Pod was created with",
    ANNOTATION_CLIENT_CONFIG: (
        f"{CONFIG_PATH} is projected from it into the running container; restore the value the Pod was created with"
    ),
}


def _frozen_change(key: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    if key in old and key not in new:
        return "removed"
    if key in new and key not in old:
        return "added"
    if old.get(key) != new.get(key):
        return "changed"
    return None


def frozen_key_errors(old_metadata: Mapping[str, Any], new_metadata: Mapping[str, Any]) -> list[str]:
    errors = []
    places: tuple[tuple[str, str, Callable[[str], str]], ...] = (
        ("labels", LABEL_INJECT, label_path),
        ("annotations", ANNOTATION_INJECTED, annotation_path),
        ("annotations", ANNOTATION_CLIENT_CONFIG, annotation_path),
    )
    for section, key, path in places:
        change = _frozen_change(key, as_mapping(old_metadata.get(section)), as_mapping(new_metadata.get(section)))
        if change is not None:
            errors.append(forbidden(path(key), f"is frozen once the Pod exists ({change}): {FROZEN_WHY[key]}"))
    return errors


@fail_open
def validate_kvcache_update(old_pod: JSON, new_pod: JSON) -> Admission:
    """The freeze on the trigger label and the two written annotations (Pod UPDATE, ``failurePolicy: Ignore``).

    It holds on terminating Pods too: a Pod serves through its grace period while the kubelet keeps reprojecting the
    client configuration file.
    """
    if not isinstance(old_pod, dict) or not isinstance(new_pod, dict):
        return allow()
    errors = frozen_key_errors(as_mapping(old_pod.get("metadata")), as_mapping(new_pod.get("metadata")))
    return deny(aggregate(errors)) if errors else allow()

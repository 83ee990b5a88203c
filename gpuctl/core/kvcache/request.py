"""The request: what a Pod asks for through its ``kvcache.gpustack.ai/`` annotations, read into an
``InjectionRequest`` or refused with every field error in them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.core.admission import aggregate, forbidden, invalid, not_supported, required
from gpuctl.core.kvcache.engines import (
    ENGINE_SPELLINGS,
    ROLE_SPELLINGS,
    SUPPORTED_ENGINES,
    SUPPORTED_ROLES,
    Engine,
    Family,
)
from gpuctl.core.kvcache.keys import (
    ANNOTATION_BINDING,
    ANNOTATION_CONTAINER,
    ANNOTATION_DOMAIN,
    ANNOTATION_ENGINE,
    ANNOTATION_FORWARDED,
    ANNOTATION_MANUFACTURER,
    ANNOTATION_ROLE,
    LABEL_INJECT,
    PREFIX,
    READ_ANNOTATIONS,
    WRITTEN_ANNOTATIONS,
    annotation_path,
)


@dataclass(frozen=True, slots=True)
class Refused:
    """A step that refuses the Pod, with the whole message (field errors in Kubernetes' wording)."""

    message: str


@dataclass(frozen=True, slots=True)
class InjectionRequest:
    """What a Pod asks for through its ``kvcache.gpustack.ai/`` annotations."""

    binding: str
    engine: Engine
    role: str | None
    """``Prefill`` or ``Decode``; None for a plain server, and always None on SGLang, which ignores the role."""
    container: str | None
    forwarded: bool


def _unexpected_key_error(key: str) -> str | None:
    path = annotation_path(key)
    if key in READ_ANNOTATIONS:
        return None
    if key == ANNOTATION_DOMAIN:
        return forbidden(
            path,
            "the reuse domain comes from the KVCachePoolBinding, which registers it and carries its ceiling; remove "
            "the annotation and name a Binding that declares the domain you want",
        )
    if key in WRITTEN_ANNOTATIONS:
        return forbidden(path, "is written by the webhook to record what it decided; remove it")
    if key == LABEL_INJECT:
        return forbidden(path, f"{LABEL_INJECT} is a label, not an annotation; move it to metadata.labels")
    readable = ", ".join(k.removeprefix(PREFIX) for k in READ_ANNOTATIONS)
    return forbidden(path, f"is not a {PREFIX} annotation this webhook reads ({readable}); fix the key")


def annotation_key_errors(annotations: Mapping[str, Any]) -> list[str]:
    """Unknown, refused and webhook-written ``kvcache.gpustack.ai/`` keys, and values that are not strings."""
    keys = sorted(k for k in annotations if isinstance(k, str) and k.startswith(PREFIX))
    errors = [e for key in keys if (e := _unexpected_key_error(key)) is not None]
    for key in READ_ANNOTATIONS:
        value = annotations.get(key)
        if value is not None and not isinstance(value, str):
            errors.append(invalid(annotation_path(key), value, "must be a string"))
    return errors


def _binding_name(value: str) -> str | Refused:
    path = annotation_path(ANNOTATION_BINDING)
    if not value:
        return Refused(required(path, "set it to the name of a KVCachePoolBinding in this Pod's namespace"))
    if "/" in value:
        return Refused(
            invalid(
                path,
                value,
                "a Binding is resolved in the Pod's own namespace and has no cross-namespace form; use the plain name "
                "of a KVCachePoolBinding in this Pod's namespace",
            )
        )
    return value


def _engine(engine: str, manufacturer: str | None) -> Engine | Refused:
    path = annotation_path(ANNOTATION_ENGINE)
    if not engine:
        return Refused(required(path, 'set "vLLM" or "SGLang"; the engine is declared, never guessed from the image'))
    family = ENGINE_SPELLINGS.get(engine)
    if family is None:
        message = not_supported(path, engine, SUPPORTED_ENGINES)
        if "ascend" in engine.lower():
            message += f'; for vLLM-Ascend set engine "vLLM" and {ANNOTATION_MANUFACTURER}: "ascend"'
        return Refused(message)
    if manufacturer is None:
        return Engine.VLLM if family is Family.VLLM else Engine.SGLANG
    mpath = annotation_path(ANNOTATION_MANUFACTURER)
    if manufacturer != "ascend":
        return Refused(not_supported(mpath, manufacturer, ["ascend"]))
    if family is not Family.VLLM:
        return Refused(
            forbidden(
                mpath,
                'selects the vLLM-Ascend runtime and applies only with engine "vLLM"; remove it, or set engine "vLLM"',
            )
        )
    return Engine.VLLM_ASCEND


def _role(value: str | None) -> str | Refused | None:
    """The vLLM role: ``Prefill``, ``Decode``, or None for a plain server."""
    if value is None:
        return None
    role = ROLE_SPELLINGS.get(value)
    if role is not None:
        return role
    path = annotation_path(ANNOTATION_ROLE)
    if value in ("Server", "server"):
        return Refused(
            invalid(
                path,
                value,
                'a plain server carries no role; remove the annotation ("Prefill" and "Decode" name the halves of a '
                "prefill/decode split)",
            )
        )
    return Refused(not_supported(path, value, SUPPORTED_ROLES) + "; omit the annotation for a plain server")


def _forwarded(value: str | None) -> bool | Refused:
    if value is None or value == "false":
        return False
    if value == "true":
        return True
    return Refused(not_supported(annotation_path(ANNOTATION_FORWARDED), value, ["true", "false"]))


def read_request(annotations: Mapping[str, Any]) -> InjectionRequest | Refused:
    """The injection the annotations ask for, or every field error in them."""
    errors = annotation_key_errors(annotations)
    if errors:
        return Refused(aggregate(errors))
    text: dict[str, str | None] = {k: annotations.get(k) for k in READ_ANNOTATIONS}
    binding = _binding_name(text[ANNOTATION_BINDING] or "")
    engine = _engine(text[ANNOTATION_ENGINE] or "", text[ANNOTATION_MANUFACTURER])
    role = None if engine is Engine.SGLANG else _role(text[ANNOTATION_ROLE])
    forwarded = _forwarded(text[ANNOTATION_FORWARDED])
    refusals = [r.message for r in (binding, engine, role, forwarded) if isinstance(r, Refused)]
    if refusals:
        return Refused(aggregate(refusals))
    assert isinstance(binding, str) and isinstance(engine, Engine) and isinstance(forwarded, bool)
    assert not isinstance(role, Refused)
    return InjectionRequest(binding, engine, role, text[ANNOTATION_CONTAINER], forwarded)

"""The annotations a Pod asks with: every accepted spelling and every refusal."""

from __future__ import annotations

import pytest

from gpuctl.core.kvcache.keys import (
    ANNOTATION_CLIENT_CONFIG,
    ANNOTATION_FORWARDED,
    ANNOTATION_INJECTED,
    ANNOTATION_MANUFACTURER,
    ANNOTATION_ROLE,
    LABEL_INJECT,
)
from tests.unit.kvcache.builders import (
    admit,
    kv_pod,
    refused,
)

# ----------------------------------------------------------------------------------------------- annotations


def test_binding_is_required() -> None:
    assert refused(kv_pod(binding=None)) == (
        "metadata.annotations[kvcache.gpustack.ai/binding]: Required value: set it to the name of a "
        "KVCachePoolBinding in this Pod's namespace"
    )


def test_binding_has_no_cross_namespace_form() -> None:
    assert refused(kv_pod(binding="team-b/chat")) == (
        'metadata.annotations[kvcache.gpustack.ai/binding]: Invalid value: "team-b/chat": a Binding is resolved in '
        "the Pod's own namespace and has no cross-namespace form; use the plain name of a KVCachePoolBinding in this "
        "Pod's namespace"
    )


def test_engine_is_required() -> None:
    assert refused(kv_pod(engine=None)) == (
        'metadata.annotations[kvcache.gpustack.ai/engine]: Required value: set "vLLM" or "SGLang"; the engine is '
        "declared, never guessed from the image"
    )


def test_an_unknown_engine_is_unsupported() -> None:
    assert refused(kv_pod(engine="TGI")) == (
        'metadata.annotations[kvcache.gpustack.ai/engine]: Unsupported value: "TGI": supported values: "vLLM", "SGLang"'
    )
    assert refused(kv_pod(engine="vllm-ascend")).endswith(
        'for vLLM-Ascend set engine "vLLM" and kvcache.gpustack.ai/manufacturer: "ascend"'
    )


def test_manufacturer_accepts_only_ascend() -> None:
    assert refused(kv_pod({ANNOTATION_MANUFACTURER: "nvidia"})) == (
        'metadata.annotations[kvcache.gpustack.ai/manufacturer]: Unsupported value: "nvidia": supported values: '
        '"ascend"'
    )


def test_manufacturer_applies_only_to_vllm() -> None:
    assert refused(kv_pod({ANNOTATION_MANUFACTURER: "ascend"}, engine="SGLang")) == (
        "metadata.annotations[kvcache.gpustack.ai/manufacturer]: Forbidden: selects the vLLM-Ascend runtime and "
        'applies only with engine "vLLM"; remove it, or set engine "vLLM"'
    )


def test_role_server_is_refused() -> None:
    assert refused(kv_pod({ANNOTATION_ROLE: "Server"})) == (
        'metadata.annotations[kvcache.gpustack.ai/role]: Invalid value: "Server": a plain server carries no role; '
        'remove the annotation ("Prefill" and "Decode" name the halves of a prefill/decode split)'
    )


def test_an_unknown_role_is_unsupported() -> None:
    assert refused(kv_pod({ANNOTATION_ROLE: "Leader"})) == (
        'metadata.annotations[kvcache.gpustack.ai/role]: Unsupported value: "Leader": supported values: "Prefill", '
        '"Decode"; omit the annotation for a plain server'
    )


def test_forwarding_declaration_accepts_true_and_false_only() -> None:
    assert admit(kv_pod({ANNOTATION_FORWARDED: "false"})).allowed
    assert refused(kv_pod({ANNOTATION_FORWARDED: "yes"})) == (
        'metadata.annotations[kvcache.gpustack.ai/launch-args-forwarded]: Unsupported value: "yes": supported '
        'values: "true", "false"'
    )


def test_the_domain_annotation_is_refused() -> None:
    assert refused(kv_pod({"kvcache.gpustack.ai/domain": "mine"})) == (
        "metadata.annotations[kvcache.gpustack.ai/domain]: Forbidden: the reuse domain comes from the "
        "KVCachePoolBinding, which registers it and carries its ceiling; remove the annotation and name a Binding "
        "that declares the domain you want"
    )


def test_an_unknown_key_is_refused() -> None:
    assert refused(kv_pod({"kvcache.gpustack.ai/bindng": "chat"})) == (
        "metadata.annotations[kvcache.gpustack.ai/bindng]: Forbidden: is not a kvcache.gpustack.ai/ annotation this "
        "webhook reads (binding, engine, manufacturer, role, container, launch-args-forwarded); fix the key"
    )


def test_other_prefixes_are_not_this_webhooks_business() -> None:
    assert admit(kv_pod({"example.com/kvcache": "x", "gpustack.ai/note": "y"})).allowed


@pytest.mark.parametrize("key", [ANNOTATION_INJECTED, ANNOTATION_CLIENT_CONFIG])
def test_the_written_annotations_are_refused_at_create(key: str) -> None:
    assert refused(kv_pod({key: "{}"})) == (
        f"metadata.annotations[{key}]: Forbidden: is written by the webhook to record what it decided; remove it"
    )


def test_the_trigger_as_an_annotation_is_refused() -> None:
    assert refused(kv_pod({LABEL_INJECT: "true"})) == (
        "metadata.annotations[kvcache.gpustack.ai/inject]: Forbidden: kvcache.gpustack.ai/inject is a label, not an "
        "annotation; move it to metadata.labels"
    )


def test_annotation_errors_are_aggregated() -> None:
    message = refused(kv_pod({"kvcache.gpustack.ai/domain": "x", "kvcache.gpustack.ai/zzz": "y"}))
    assert message.startswith("[metadata.annotations[kvcache.gpustack.ai/domain]: Forbidden:")
    assert "metadata.annotations[kvcache.gpustack.ai/zzz]: Forbidden:" in message


def test_a_value_that_is_not_a_string_is_invalid() -> None:
    assert refused(kv_pod({ANNOTATION_ROLE: 3})) == (
        "metadata.annotations[kvcache.gpustack.ai/role]: Invalid value: 3: must be a string"
    )

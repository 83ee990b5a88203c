"""The two rules end to end: the trigger, the update freeze, failure policies, and answers for any input."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.core.admission import Admission, json_patch
from gpuctl.core.kvcache.keys import (
    ANNOTATION_BINDING,
    ANNOTATION_CLIENT_CONFIG,
    ANNOTATION_CONTAINER,
    ANNOTATION_ENGINE,
    ANNOTATION_FORWARDED,
    ANNOTATION_INJECTED,
    ANNOTATION_MANUFACTURER,
    ANNOTATION_ROLE,
    LABEL_INJECT,
)
from gpuctl.core.kvcache.webhooks import admit_kvcache_pod, validate_kvcache_update
from tests.unit.kvcache.builders import (
    JSON,
    VLLM_SERVER,
    admit,
    admitted,
    context,
    kv_pod,
    record,
    server,
)

# ----------------------------------------------------------------------------------------------- the trigger


def test_a_pod_without_the_label_passes_untouched() -> None:
    pod = kv_pod(labels={"app": "chat"})
    result = admit(pod)
    assert result.allowed and result.mutated == pod
    assert json_patch(pod, result.mutated) == []


def test_a_label_other_than_true_passes_untouched() -> None:
    pod = kv_pod(labels={LABEL_INJECT: "false"}, annotations={"kvcache.gpustack.ai/domain": "x"})
    result = admit(pod)
    assert result.allowed and result.mutated == pod


def test_the_label_triggers_the_injection() -> None:
    assert ANNOTATION_INJECTED in admitted(kv_pod())["metadata"]["annotations"]


# ----------------------------------------------------------------------------------------------- the update freeze


def injected_pod() -> JSON:
    return admitted(kv_pod())


def test_an_update_that_leaves_the_frozen_keys_alone_is_allowed() -> None:
    old = injected_pod()
    new = json.loads(json.dumps(old))
    new["metadata"]["annotations"]["example.com/note"] = "x"
    new["metadata"]["labels"]["app"] = "chat"
    result = validate_kvcache_update(old, new)
    assert result.allowed and result.mutated is None


def test_finalizer_removal_on_a_terminating_pod_is_allowed() -> None:
    old = injected_pod()
    old["metadata"].update(deletionTimestamp="2026-11-29T10:00:00Z", finalizers=["example.com/hold"])
    new = json.loads(json.dumps(old))
    new["metadata"]["finalizers"] = []
    assert validate_kvcache_update(old, new).allowed


def test_changing_the_label_is_refused() -> None:
    old = injected_pod()
    new = json.loads(json.dumps(old))
    new["metadata"]["labels"][LABEL_INJECT] = "false"
    assert validate_kvcache_update(old, new).message == (
        "metadata.labels[kvcache.gpustack.ai/inject]: Forbidden: is frozen once the Pod exists (changed): injection "
        "runs only at CREATE, so a changed label would misstate whether this Pod uses a cache; change it on the "
        "workload's Pod template and let the workload roll"
    )


def test_adding_the_label_to_a_live_pod_is_refused() -> None:
    old = kv_pod(labels={"app": "chat"})
    new = json.loads(json.dumps(old))
    new["metadata"]["labels"][LABEL_INJECT] = "true"
    message = validate_kvcache_update(old, new).message
    assert message and message.startswith(
        "metadata.labels[kvcache.gpustack.ai/inject]: Forbidden: is frozen once the Pod exists (added)"
    )


def test_removing_the_record_is_refused() -> None:
    old = injected_pod()
    new = json.loads(json.dumps(old))
    del new["metadata"]["annotations"][ANNOTATION_INJECTED]
    assert validate_kvcache_update(old, new).message == (
        "metadata.annotations[kvcache.gpustack.ai/injected]: Forbidden: is frozen once the Pod exists (removed): it "
        "records what the webhook decided at CREATE; restore the value the Pod was created with"
    )


def test_editing_the_client_config_of_a_terminating_pod_is_refused() -> None:
    old = injected_pod()
    old["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    new = json.loads(json.dumps(old))
    new["metadata"]["annotations"][ANNOTATION_CLIENT_CONFIG] = '{"master_server_address":"evil:1"}'
    assert validate_kvcache_update(old, new).message == (
        "metadata.annotations[kvcache.gpustack.ai/client-config]: Forbidden: is frozen once the Pod exists (changed): "
        "/etc/gpustack/kvcache/mooncake.json is projected from it into the running container; restore the value the "
        "Pod was created with"
    )


def test_several_frozen_changes_are_aggregated() -> None:
    old = injected_pod()
    new = json.loads(json.dumps(old))
    del new["metadata"]["labels"][LABEL_INJECT]
    new["metadata"]["annotations"][ANNOTATION_INJECTED] = "{}"
    message = validate_kvcache_update(old, new).message
    assert message and message.startswith("[metadata.labels[kvcache.gpustack.ai/inject]: Forbidden:")
    assert "metadata.annotations[kvcache.gpustack.ai/injected]: Forbidden:" in message


class Exploding(dict[str, Any]):
    """A mapping whose reads fail: stands in for an internal error."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")


def test_the_update_freeze_fails_open() -> None:
    result = validate_kvcache_update(Exploding(), {})
    assert result.allowed
    assert result.warnings == ("validate_kvcache_update skipped: RuntimeError",) and "boom" in (result.error or "")


def test_the_injection_fails_closed() -> None:
    result = admit_kvcache_pod(Exploding(), context())
    assert not result.allowed
    assert result.message == "internal error in admit_kvcache_pod: RuntimeError"  # the text may quote the request
    assert result.error == "RuntimeError: boom"


# ----------------------------------------------------------------------------------------------- properties

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=20,
)
known_keys = st.sampled_from(
    [ANNOTATION_BINDING, ANNOTATION_ENGINE, ANNOTATION_ROLE, ANNOTATION_CONTAINER, ANNOTATION_FORWARDED,
     ANNOTATION_MANUFACTURER, "kvcache.gpustack.ai/domain", "example.com/x"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(json_values, st.dictionaries(known_keys, json_values, max_size=4), json_values)
def test_admit_answers_any_json(garbage: Any, notes: dict[str, Any], container: Any) -> None:
    labelled = {"metadata": {"namespace": "team-a", "labels": {LABEL_INJECT: "true"}}}
    candidates = [
        garbage,
        {"metadata": garbage},
        {**labelled, "spec": garbage},
        {"metadata": {**labelled["metadata"], "annotations": {**notes, ANNOTATION_BINDING: "chat"}}, "spec": garbage},
        kv_pod(containers=[container]),
        kv_pod(containers=[server(*VLLM_SERVER, env=garbage)]),
        kv_pod(notes, containers=[container]),
    ]
    for obj in candidates:
        result = admit_kvcache_pod(obj, context())
        assert isinstance(result, Admission)
        assert result.allowed or result.message
        assert not (result.message or "").startswith("internal error"), result.message


@settings(max_examples=300, deadline=None)
@given(json_values, json_values)
def test_validate_update_answers_any_json(old: Any, new: Any) -> None:
    for pair in ((old, new), ({"metadata": old}, {"metadata": new}), (injected_pod(), {"metadata": new})):
        result = validate_kvcache_update(*pair)
        assert isinstance(result, Admission)
        assert result.allowed or result.message
        assert not result.warnings  # no internal error, so nothing was skipped


@st.composite
def valid_pod(draw: st.DrawFn) -> JSON:
    engine = draw(st.sampled_from(["vLLM", "SGLang"]))
    notes: dict[str, str] = {}
    if engine == "vLLM" and draw(st.booleans()):
        notes[ANNOTATION_ROLE] = draw(st.sampled_from(["Prefill", "Decode"]))
    prefix = draw(st.sampled_from([[], ["tini", "--"], ["dumb-init", "--"], ["env", "A=1"], ["/usr/bin/env"]]))
    program = ["vllm", "serve"] if engine == "vLLM" else ["python3", "-m", "sglang.launch_server"]
    argv = [*prefix, *program, "--model", "m"]
    split = draw(st.integers(1, len(argv)))
    env = [
        {"name": n, "value": "v"}
        for n in draw(st.lists(st.sampled_from(["A", "MC_TE_METRIC", "MOONCAKE_MASTER"]), max_size=3))
    ]
    c = server(argv[:split], argv[split:] or None, env=env) if env else server(argv[:split], argv[split:] or None)
    containers = [c]
    if draw(st.booleans()):
        containers.insert(0, server(name="proxy", command=["envoy"]))
        notes[ANNOTATION_CONTAINER] = "server"
    return kv_pod(notes, containers, engine=engine)


@settings(max_examples=200, deadline=None)
@given(valid_pod())
def test_valid_pods_are_injected_and_round_trip_through_the_patch(pod: JSON) -> None:
    mutated = admitted(pod)
    assert record(mutated)["launchArgsForwarded"] is False
    again = admit(mutated)
    assert not again.allowed  # the written record and keys are refused on a second CREATE, never injected twice

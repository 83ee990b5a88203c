"""The KV cache injection webhook: every accepted and refused case, the launch grammar on real command lines, the
update freeze, the patch round trip, and answers for any input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuctl.core.admission import Admission, apply_patch, json_patch
from gpuctl.core.kvcache import (
    ANNOTATION_BINDING,
    ANNOTATION_CLIENT_CONFIG,
    ANNOTATION_CONTAINER,
    ANNOTATION_ENGINE,
    ANNOTATION_FORWARDED,
    ANNOTATION_INJECTED,
    ANNOTATION_MANUFACTURER,
    ANNOTATION_ROLE,
    LABEL_INJECT,
    Family,
    KVCacheContext,
    LaunchRefusal,
    admit_kvcache_pod,
    names_flag,
    parse_kvcache_backend,
    parse_kvcache_pool,
    parse_kvcache_pool_binding,
    parse_launch,
    validate_kvcache_update,
)

JSON = dict[str, Any]
ENDPOINT = "mooncake-dram-leader.gpustack-system.svc:50051"
V = LaunchRefusal


# ----------------------------------------------------------------------------------------------- builders


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


# ----------------------------------------------------------------------------------------------- records


def test_records_read_their_fields() -> None:
    b = parse_kvcache_pool_binding(binding_object(deleting=True))
    assert (b.namespace, b.name, b.pool, b.domain, b.dtype, b.deleting) == (
        "team-a",
        "chat",
        "shared-dram",
        "team-a-chat",
        "fp8_e4m3",
        True,
    )
    mixed: Any = ["Auto", "RDMA", "rdma", "CANN", "nvlink", 7]
    p = parse_kvcache_pool(pool_object(transports=mixed))
    assert p.transports == ("tcp", "rdma", "ascend", "nvlink")
    assert (p.backends, p.client_endpoint) == (("mooncake-dram",), ENDPOINT)
    assert p.ledger is not None and (p.ledger.status, p.ledger.reason) == ("True", "LedgerObserved")
    odd = parse_kvcache_pool(pool_object(ledger=("Maybe", "", "")))
    assert odd.ledger is not None and odd.ledger.status == "Unknown"


RECORD_OBJECTS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(["metadata", "spec", "status", "name"]), c),
    max_leaves=15,
)


@given(RECORD_OBJECTS)
def test_record_parsers_read_any_object(obj: Any) -> None:
    mapping = obj if isinstance(obj, dict) else {"spec": obj}
    assert parse_kvcache_pool_binding(mapping).domain
    assert isinstance(parse_kvcache_pool(mapping).transports, tuple)
    assert isinstance(parse_kvcache_backend(mapping).name, str)


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


# ----------------------------------------------------------------------------------------------- injection: vLLM


def test_vllm_gets_the_file_vehicle_exactly() -> None:
    pod = kv_pod()
    mutated = admitted(pod)
    c = container_of(mutated)
    assert c["command"] == ["vllm"]
    assert c["args"] == [
        "serve",
        "--model",
        "Qwen/Qwen3-8B",
        "--kv-transfer-config",
        '{"kv_connector":"MooncakeStoreConnector","kv_role":"kv_both"}',
        "--kv-cache-dtype",
        "fp8_e4m3",
    ]
    assert c["env"] == [
        {"name": "MOONCAKE_CONFIG_PATH", "value": "/etc/gpustack/kvcache/mooncake.json"},
        {"name": "MC_TE_METRIC", "value": "1"},
        {"name": "MC_STORE_CLIENT_METRIC_BANDWIDTH", "value": "1"},
    ]
    assert c["volumeMounts"] == [{"name": "gpustack-kvcache", "mountPath": "/etc/gpustack/kvcache", "readOnly": True}]
    assert mutated["spec"]["volumes"] == [
        {
            "name": "gpustack-kvcache",
            "downwardAPI": {
                "items": [
                    {
                        "path": "mooncake.json",
                        "fieldRef": {"fieldPath": "metadata.annotations['kvcache.gpustack.ai/client-config']"},
                    }
                ]
            },
        }
    ]
    assert mutated["metadata"]["annotations"][ANNOTATION_CLIENT_CONFIG] == (
        '{"master_server_address":"mooncake-dram-leader.gpustack-system.svc:50051","metadata_server":"P2PHANDSHAKE",'
        '"protocol":"tcp","device_name":"","global_segment_size":0,"local_buffer_size":134217728,'
        '"mode":"standalone-store","tenant_id":"team-a-chat"}'
    )
    assert mutated["metadata"]["annotations"][ANNOTATION_INJECTED] == (
        '{"binding":"chat","engine":"vllm","vehicle":"file","domain":"team-a-chat","tenantInjected":true,'
        '"launchProgram":"vllm","launchArgsForwarded":false}'
    )


def test_resources_are_never_touched() -> None:
    resources = {"limits": {"nvidia.com/gpu": "1", "memory": "32Gi"}, "requests": {"memory": "32Gi"}}
    for engine, launch in (("vLLM", VLLM_SERVER), ("SGLang", SGLANG_SERVER)):
        pod = kv_pod(engine=engine, containers=[server(*launch, resources=resources)])
        assert container_of(admitted(pod))["resources"] == resources


def test_vllm_existing_volumes_env_and_mounts_are_extended() -> None:
    c = server(
        *VLLM_SERVER,
        env=[{"name": "HF_HOME", "value": "/data"}, {"name": "MC_TE_METRIC", "value": "0"}],
        volumeMounts=[{"name": "models", "mountPath": "/data"}],
    )
    mutated = admitted(kv_pod(containers=[c], volumes=[{"name": "models", "emptyDir": {}}]))
    assert [v["name"] for v in mutated["spec"]["volumes"]] == ["models", "gpustack-kvcache"]
    assert [m["name"] for m in container_of(mutated)["volumeMounts"]] == ["models", "gpustack-kvcache"]
    env = env_of(mutated)
    assert env["MC_TE_METRIC"] == "0"  # a value the author set is left alone
    assert env["MC_STORE_CLIENT_METRIC_BANDWIDTH"] == "1"
    assert env["HF_HOME"] == "/data"


@pytest.mark.parametrize(("role", "kv_role"), [("Prefill", "kv_producer"), ("Decode", "kv_consumer")])
def test_vllm_roles_select_the_connector_role(role: str, kv_role: str) -> None:
    mutated = admitted(kv_pod({ANNOTATION_ROLE: role}))
    assert json.loads(container_of(mutated)["args"][4]) == {
        "kv_connector": "MooncakeStoreConnector",
        "kv_role": kv_role,
    }


def test_older_lowercase_spellings_are_accepted() -> None:
    mutated = admitted(kv_pod({ANNOTATION_ROLE: "decode"}, engine="vllm"))
    assert json.loads(container_of(mutated)["args"][4])["kv_role"] == "kv_consumer"
    assert record(admitted(kv_pod(engine="sglang")))["engine"] == "sglang"


def test_vllm_ascend_uses_the_ascend_connector_and_transport() -> None:
    ctx = context(pools=[pool_object(transports=["CANN"])])
    mutated = admitted(kv_pod({ANNOTATION_MANUFACTURER: "ascend"}), ctx)
    assert json.loads(container_of(mutated)["args"][4])["kv_connector"] == "AscendStoreConnector"
    assert file_config(mutated)["protocol"] == "ascend"
    assert record(mutated)["engine"] == "vllm-ascend"
    assert record(mutated)["vehicle"] == "file"


def test_vllm_ascend_picks_the_ascend_group_of_a_mixed_pool() -> None:
    ctx = context(pools=[pool_object(transports=["RDMA", "CANN"])])
    assert file_config(admitted(kv_pod({ANNOTATION_MANUFACTURER: "ascend"}), ctx))["protocol"] == "ascend"


def test_a_command_only_launch_gets_the_arguments_appended_to_command() -> None:
    mutated = admitted(kv_pod(containers=[server(["vllm", "serve", "Qwen/Qwen3-8B"])]))
    c = container_of(mutated)
    assert "args" not in c
    assert c["command"][:3] == ["vllm", "serve", "Qwen/Qwen3-8B"]
    assert c["command"][3] == "--kv-transfer-config"


# ----------------------------------------------------------------------------------------------- injection: SGLang


def test_sglang_gets_the_environment_vehicle_exactly() -> None:
    mutated = admitted(kv_pod(engine="SGLang"))
    c = container_of(mutated)
    assert c["args"] == [
        "--model-path",
        "Qwen/Qwen3-8B",
        "--hicache-storage-backend",
        "mooncake",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--enable-hierarchical-cache",
    ]
    assert c["env"] == [
        {"name": "MOONCAKE_MASTER", "value": ENDPOINT},
        {"name": "MOONCAKE_TE_META_DATA_SERVER", "value": "P2PHANDSHAKE"},
        {"name": "MOONCAKE_PROTOCOL", "value": "tcp"},
        {"name": "MOONCAKE_DEVICE", "value": ""},
        {"name": "MOONCAKE_GLOBAL_SEGMENT_SIZE", "value": "0"},
        {"name": "MOONCAKE_LOCAL_HOSTNAME", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "MOONCAKE_TENANT_ID", "value": "team-a-chat"},
        {"name": "MC_TE_METRIC", "value": "1"},
        {"name": "MC_STORE_CLIENT_METRIC_BANDWIDTH", "value": "1"},
    ]
    assert "volumeMounts" not in c and "volumes" not in mutated["spec"]
    assert ANNOTATION_CLIENT_CONFIG not in mutated["metadata"]["annotations"]
    assert mutated["metadata"]["annotations"][ANNOTATION_INJECTED] == (
        '{"binding":"chat","engine":"sglang","vehicle":"environment","domain":"team-a-chat","tenantInjected":true,'
        '"launchProgram":"python3 -m sglang.launch_server","launchArgsForwarded":false}'
    )


def test_sglang_injected_variables_overwrite_the_authors_in_place() -> None:
    env = [
        {"name": "MOONCAKE_TENANT_ID", "value": "mine"},
        {"name": "OTHER", "value": "x"},
        {"name": "MOONCAKE_MASTER", "value": "elsewhere:1"},
        {"name": "MOONCAKE_TENANT_ID", "value": "again"},
    ]
    mutated = admitted(kv_pod(engine="SGLang", containers=[server(*SGLANG_SERVER, env=env)]))
    names = [e["name"] for e in container_of(mutated)["env"]]
    assert names[:3] == ["MOONCAKE_TENANT_ID", "OTHER", "MOONCAKE_MASTER"]
    assert names.count("MOONCAKE_TENANT_ID") == 1
    assert env_of(mutated)["MOONCAKE_TENANT_ID"] == "team-a-chat"
    assert env_of(mutated)["MOONCAKE_MASTER"] == ENDPOINT


def test_sglang_keeps_an_existing_hierarchical_cache_flag() -> None:
    c = server(["python3", "-m", "sglang.launch_server"], ["--model-path", "m", "--enable-hierarchical-cache"])
    args = container_of(admitted(kv_pod(engine="SGLang", containers=[c])))["args"]
    assert args.count("--enable-hierarchical-cache") == 1
    assert args[-1] == "fp8_e4m3"


def test_sglang_ignores_the_role_annotation_whatever_it_says() -> None:
    plain = admitted(kv_pod(engine="SGLang"))
    for role in ("Prefill", "Server", "anything"):
        assert admitted(kv_pod({ANNOTATION_ROLE: role}, engine="SGLang"))["spec"] == plain["spec"]


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


# ----------------------------------------------------------------------------------------------- the container


def test_a_single_container_needs_no_name() -> None:
    assert admit(kv_pod()).allowed


def test_several_containers_need_the_container_annotation() -> None:
    pod = kv_pod(containers=[server(name="proxy", command=["envoy"]), server(*VLLM_SERVER)])
    assert refused(pod) == (
        "metadata.annotations[kvcache.gpustack.ai/container]: Required value: the Pod has 2 containers (proxy, "
        "server) and none is named; the first is never chosen, so set it to the engine's container"
    )


def test_the_named_container_is_configured() -> None:
    pod = kv_pod(
        {ANNOTATION_CONTAINER: "server"}, containers=[server(name="proxy", command=["envoy"]), server(*VLLM_SERVER)]
    )
    mutated = admitted(pod)
    assert container_of(mutated, 0) == pod["spec"]["containers"][0]
    assert "--kv-transfer-config" in container_of(mutated, 1)["args"]


def test_an_init_container_cannot_be_named() -> None:
    pod = kv_pod({ANNOTATION_CONTAINER: "warmup"}, initContainers=[server(name="warmup", command=["vllm"])])
    assert refused(pod) == (
        'metadata.annotations[kvcache.gpustack.ai/container]: Forbidden: names init container "warmup", which '
        "finishes before the workload starts, so configuring it caches nothing; name an app container: server"
    )


def test_an_unknown_container_name_is_invalid() -> None:
    assert refused(kv_pod({ANNOTATION_CONTAINER: "engine"})) == (
        'metadata.annotations[kvcache.gpustack.ai/container]: Invalid value: "engine": the Pod has no container of '
        "that name; name one of: server"
    )


def test_a_pod_without_containers_is_refused() -> None:
    assert refused(kv_pod(containers=[])) == "spec.containers: Required value: a Pod must have at least one container"


def test_malformed_container_fields_are_invalid() -> None:
    garbled: Any = ["vllm", 3]
    assert refused(kv_pod(containers=[server(garbled)])) == (
        "spec.containers[0].command: Invalid value: ['vllm', 3]: must be a list of strings"
    )
    assert refused(kv_pod(containers=[server(*VLLM_SERVER, env={"A": "1"})])) == (
        "spec.containers[0].env: Invalid value: {'A': '1'}: must be a list of objects"
    )


# ----------------------------------------------------------------------------------------------- the launch (in the Pod)


def test_neither_command_nor_args_is_refused() -> None:
    assert refused(kv_pod(containers=[server()])) == (
        "spec.containers[0].command: Required value: the container declares neither command nor args, so an appended "
        "argument would replace the image's CMD instead of adding to it; put vllm in command and the image's launch "
        "arguments in args"
    )


def test_args_without_command_is_refused() -> None:
    assert refused(kv_pod(containers=[server(args=["serve", "m"])])) == (
        "spec.containers[0].command: Required value: the container declares args but no command, so the image "
        "ENTRYPOINT receiving them cannot be inspected; put vllm in command, or declare "
        'kvcache.gpustack.ai/launch-args-forwarded: "true" only if the image ENTRYPOINT forwards appended arguments '
        "to the engine"
    )


def test_args_without_command_is_admitted_when_forwarding_is_declared() -> None:
    mutated = admitted(kv_pod({ANNOTATION_FORWARDED: "true"}, containers=[server(args=["--model", "m"])]))
    assert container_of(mutated)["args"][:3] == ["--model", "m", "--kv-transfer-config"]
    assert "command" not in container_of(mutated)
    assert record(mutated)["launchProgram"] == ""
    assert record(mutated)["launchArgsForwarded"] is True


def test_a_launcher_with_nothing_after_it_is_refused() -> None:
    assert refused(kv_pod({ANNOTATION_FORWARDED: "true"}, containers=[server(["tini", "--"], [])])) == (
        'spec.containers[0].command: Forbidden: "tini" names no program after it, so the appended connector flag '
        "would become what it runs; put vllm and its arguments after it"
    )


def test_a_launcher_with_the_engine_after_it_is_admitted() -> None:
    mutated = admitted(kv_pod(containers=[server(["/usr/bin/tini", "--"], ["vllm", "serve", "m"])]))
    assert record(mutated)["launchProgram"] == "vllm"
    assert container_of(mutated)["command"] == ["/usr/bin/tini", "--"]


def test_a_shell_command_is_refused_even_when_forwarding_is_declared() -> None:
    pod = kv_pod({ANNOTATION_FORWARDED: "true"}, containers=[server(["sh", "-c", "vllm serve m"])])
    assert refused(pod) == (
        'spec.containers[0].command: Forbidden: "sh -c" runs a shell that reads its commands from a string (or '
        "stdin): appended arguments become the shell's positional parameters and never reach the engine, even with "
        "kvcache.gpustack.ai/launch-args-forwarded declared; launch the engine directly (vllm in command, its "
        "arguments in args), or drop the kvcache.gpustack.ai/inject label and configure the connector in that command "
        "yourself"
    )


def test_a_hidden_command_line_is_refused_unless_declared() -> None:
    c = server(["env", "-S", "vllm serve m"])
    assert refused(kv_pod(containers=[c])) == (
        "spec.containers[0].command: Forbidden: env -S hides the command line in one argument, so admission cannot "
        "see what runs or where appended arguments go; launch the engine directly (vllm in command, its arguments in "
        'args), or declare kvcache.gpustack.ai/launch-args-forwarded: "true" only if that command line forwards '
        "appended arguments to the engine"
    )
    mutated = admitted(kv_pod({ANNOTATION_FORWARDED: "true"}, containers=[c]))
    assert (record(mutated)["launchProgram"], record(mutated)["launchArgsForwarded"]) == ("", True)


def test_a_script_is_refused_unless_declared() -> None:
    c = server(["./run.sh"], ["--model", "m"])
    assert refused(kv_pod(containers=[c])) == (
        'spec.containers[0].command: Forbidden: "./run.sh" runs a script, and whether appended arguments reach the '
        'engine depends on whether it forwards "$@"; launch the engine directly (vllm in command, its arguments in '
        'args), or declare kvcache.gpustack.ai/launch-args-forwarded: "true" only if the script forwards appended '
        "arguments to the engine"
    )
    mutated = admitted(kv_pod({ANNOTATION_FORWARDED: "true"}, containers=[c]))
    assert (record(mutated)["launchProgram"], record(mutated)["launchArgsForwarded"]) == ("./run.sh", True)


def test_a_wrapper_is_refused_unless_declared() -> None:
    c = server(["/entrypoint"], ["vllm", "serve", "m"])
    assert refused(kv_pod(containers=[c])).startswith(
        'spec.containers[0].command: Forbidden: "/entrypoint" is a wrapper admission cannot open;'
    )
    assert record(admitted(kv_pod({ANNOTATION_FORWARDED: "true"}, containers=[c])))["launchProgram"] == "/entrypoint"


def test_another_engines_program_is_refused_even_when_declared() -> None:
    pod = kv_pod({ANNOTATION_FORWARDED: "true"}, containers=[server(*SGLANG_SERVER)])
    assert refused(pod) == (
        'spec.containers[0].command: Forbidden: "python3 -m sglang.launch_server" is SGLang\'s program, but '
        "kvcache.gpustack.ai/engine declares vLLM; launch vllm, or declare the engine that runs"
    )


def test_an_unrecognised_program_is_refused_unless_declared() -> None:
    c = server(["python3", "-m", "vllm.entrypoints.openai.api_server"], ["--model", "m"])
    assert refused(kv_pod(containers=[c])) == (
        'spec.containers[0].command: Forbidden: "python3 -m vllm.entrypoints.openai.api_server" is not the vLLM '
        "entry point (vllm); launch the engine directly (vllm in command, its arguments in args), or declare "
        'kvcache.gpustack.ai/launch-args-forwarded: "true" only if "python3 -m vllm.entrypoints.openai.api_server" '
        "forwards appended arguments to the engine"
    )
    mutated = admitted(kv_pod({ANNOTATION_FORWARDED: "true"}, containers=[c]))
    assert record(mutated)["launchProgram"] == "python3 -m vllm.entrypoints.openai.api_server"
    assert record(mutated)["launchArgsForwarded"] is True


def test_a_recognised_launch_records_no_forwarding_even_when_declared() -> None:
    assert record(admitted(kv_pod({ANNOTATION_FORWARDED: "true"})))["launchArgsForwarded"] is False


# ----------------------------------------------------------------------------------------------- owned keys


def test_vllm_refuses_its_own_config_path_variable() -> None:
    c = server(*VLLM_SERVER, env=[{"name": "MOONCAKE_CONFIG_PATH", "value": "/x.json"}])
    assert refused(kv_pod(containers=[c])) == (
        "spec.containers[0].env[0].name: Forbidden: MOONCAKE_CONFIG_PATH is written by the KV cache injection for "
        "vLLM: the container already has a KV cache configured and two sources for one setting cannot be diagnosed; "
        "remove yours, or drop the kvcache.gpustack.ai/inject label"
    )


@pytest.mark.parametrize(
    "token",
    [
        "--kv-transfer-config",
        "--kv_transfer_config",
        "--kv-transfer-config={}",
        "--kv-transfer-config.kv_role=x",
        "--kv-transfer",
    ],
)
def test_vllm_refuses_its_own_connector_flag_in_any_spelling(token: str) -> None:
    message = refused(kv_pod(containers=[server(["vllm"], ["serve", "m", token, "{}"])]))
    assert message.startswith("spec.containers[0].args[2]: Forbidden: ")
    if token != "--kv-transfer-config":
        assert f"{json.dumps(token)} is read as --kv-transfer-config, which is written by" in message


def test_sglang_refuses_its_own_backend_flag() -> None:
    c = server(["python3", "-m", "sglang.launch_server"], ["--hicache-storage-backend", "file"])
    assert refused(kv_pod(engine="SGLang", containers=[c])) == (
        'spec.containers[0].args[0]: Forbidden: "--hicache-storage-backend" is written by the KV cache injection for '
        "SGLang: the container already has a KV cache configured and two sources for one setting cannot be "
        "diagnosed; remove yours, or drop the kvcache.gpustack.ai/inject label"
    )


@pytest.mark.parametrize("token", ["--hicache-storage-backend-extra-config", "--hicache-storage-backend-extra"])
def test_sglang_refuses_the_extra_config_source_flag(token: str) -> None:
    c = server(["python3", "-m", "sglang.launch_server"], [token, "{}"])
    assert "selects where SGLang reads its store configuration" in refused(kv_pod(engine="SGLang", containers=[c]))


def test_sglang_refuses_the_config_path_variable() -> None:
    c = server(*SGLANG_SERVER, env=[{"name": "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", "value": "/x"}])
    assert refused(kv_pod(engine="SGLang", containers=[c])) == (
        "spec.containers[0].env[0].name: Forbidden: SGLANG_HICACHE_MOONCAKE_CONFIG_PATH selects where SGLang reads "
        "its store configuration, leaving every injected MOONCAKE_* variable unread; remove it, or drop the "
        "kvcache.gpustack.ai/inject label"
    )


def test_a_key_of_the_other_engine_is_not_refused() -> None:
    vllm = server(*VLLM_SERVER, env=[{"name": "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", "value": "/x"}])
    assert admit(kv_pod(containers=[vllm])).allowed
    sglang = server(*SGLANG_SERVER, env=[{"name": "MOONCAKE_CONFIG_PATH", "value": "/x"}])
    assert admit(kv_pod(engine="SGLang", containers=[sglang])).allowed
    unrelated = server(["python3", "-m", "sglang.launch_server"], ["--hicache-storage-prefetch-policy", "best_effort"])
    assert admit(kv_pod(engine="SGLang", containers=[unrelated])).allowed


@pytest.mark.parametrize(
    ("engine", "token"),
    [
        ("vLLM", "--kv-cache-dtype"),
        ("vLLM", "--kv-cache-dtype=fp8"),
        ("vLLM", "--kv_cache_dtype"),
        ("vLLM", "--kv-cache-d"),
        ("SGLang", "--kv-cache-dtype"),
        ("SGLang", "--kv-cache-dtype=bf16"),
    ],
)
def test_the_kv_cache_dtype_is_refused_in_any_spelling(engine: str, token: str) -> None:
    base = VLLM_SERVER if engine == "vLLM" else SGLANG_SERVER
    c = server(base[0], [*base[1], token, "fp8"])
    message = refused(kv_pod(engine=engine, containers=[c]))
    assert message.startswith(f"spec.containers[0].args[{len(base[1])}]: Forbidden: {json.dumps(token)} ")
    assert message.endswith(
        "set from the KVCachePoolBinding's spec.domain.dtype, so that every engine on one reuse domain writes one "
        "element type; remove yours and name a Binding that declares the dtype you want"
    )


def test_the_dtype_setting_off_admits_the_engines_own_dtype_and_renders_none() -> None:
    c = server(["vllm"], ["serve", "m", "--kv-cache-dtype", "auto"])
    mutated = admitted(kv_pod(containers=[c]), context(kv_cache_dtype_owned=False))
    assert container_of(mutated)["args"].count("--kv-cache-dtype") == 1


def test_a_similar_but_different_flag_is_not_the_dtype() -> None:
    c = server(["vllm"], ["serve", "m", "--kv-cache-memory-bytes", "1G", "--kv-cache-"])
    assert admit(kv_pod(containers=[c])).allowed


def test_the_owned_volume_name_collides() -> None:
    pod = kv_pod(volumes=[{"name": "gpustack-kvcache", "emptyDir": {}}])
    assert refused(pod) == (
        'spec.volumes[0].name: Forbidden: "gpustack-kvcache" is owned by the KV cache injection; rename yours'
    )


def test_the_owned_mount_path_collides() -> None:
    c = server(*VLLM_SERVER, volumeMounts=[{"name": "cfg", "mountPath": "/etc/gpustack/kvcache/"}])
    assert refused(kv_pod(containers=[c], volumes=[{"name": "cfg", "emptyDir": {}}])) == (
        "spec.containers[0].volumeMounts[0].mountPath: Forbidden: /etc/gpustack/kvcache is where the KV cache "
        "injection mounts the client configuration; mount yours elsewhere"
    )


def test_sglang_owns_no_volume() -> None:
    c = server(*SGLANG_SERVER, volumeMounts=[{"name": "gpustack-kvcache", "mountPath": "/etc/gpustack/kvcache"}])
    assert admit(
        kv_pod(engine="SGLang", containers=[c], volumes=[{"name": "gpustack-kvcache", "emptyDir": {}}])
    ).allowed


def test_container_errors_are_aggregated() -> None:
    c = server(["sh", "-c", "vllm serve"], env=[{"name": "MOONCAKE_CONFIG_PATH", "value": "x"}])
    message = refused(kv_pod(containers=[c]))
    assert message.startswith("[spec.containers[0].command: Forbidden: ")
    assert "spec.containers[0].env[0].name: Forbidden: MOONCAKE_CONFIG_PATH" in message


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


# ----------------------------------------------------------------------------------------------- the launch grammar

FWD = True
# (command, args, engine, forwarded, accepted, program, refusal)
COMMAND_LINES: list[tuple[list[str] | None, list[str] | None, str, bool, bool, str, LaunchRefusal | None]] = [
    # vLLM: the entry point, directly and behind transparent launchers
    (["vllm", "serve", "meta-llama/Llama-3.1-8B"], None, "vLLM", False, True, "vllm", None),
    (["vllm"], ["serve", "--model", "Qwen/Qwen3-8B"], "vLLM", False, True, "vllm", None),
    (["vllm", "serve"], None, "vLLM", False, True, "vllm", None),
    (["/usr/local/bin/vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["/opt/venv/bin/vllm"], ["serve", "m", "--tensor-parallel-size", "2"], "vLLM", False, True, "vllm", None),
    (["/usr/bin/tini", "--", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["tini", "-s", "--", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["tini", "-g", "-p", "SIGTERM", "--"], ["vllm", "serve", "m"], "vLLM", False, True, "vllm", None),
    (["dumb-init", "--", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["dumb-init", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["dumb-init", "-c", "--rewrite", "15:2", "--", "vllm"], ["serve", "m"], "vLLM", False, True, "vllm", None),
    (["env", "CUDA_VISIBLE_DEVICES=0", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["/usr/bin/env", "-u", "HTTP_PROXY", "VLLM_USE_V1=1", "vllm", "serve"], None, "vLLM", False, True, "vllm", None),
    (["env", "-i", "--", "PATH=/usr/bin", "vllm"], ["serve", "m"], "vLLM", False, True, "vllm", None),
    (["exec", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["tini", "--", "env", "HF_HOME=/data", "vllm", "serve", "m"], None, "vLLM", False, True, "vllm", None),
    (["vllm"], ["serve", "m"], "vllm-ascend", False, True, "vllm", None),
    # vLLM: forms that are not the entry point
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], None, "vLLM", False, False,
     "python3 -m vllm.entrypoints.openai.api_server", V.UNRECOGNISED_PROGRAM),
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], None, "vLLM", FWD, True,
     "python3 -m vllm.entrypoints.openai.api_server", None),
    (["sh", "-c", "vllm serve m"], None, "vLLM", False, False, "sh -c", V.SHELL_COMMAND),
    (["/bin/sh", "-c", "exec vllm serve m"], None, "vLLM", FWD, False, "sh -c", V.SHELL_COMMAND),
    (["bash", "-lc", "source /venv/bin/activate && vllm serve m"], None, "vLLM", FWD, False, "bash -lc",
     V.SHELL_COMMAND),
    (["bash", "-o", "pipefail", "-c", "vllm serve m"], None, "vLLM", False, False, "bash -c", V.SHELL_COMMAND),
    (["busybox", "sh", "-c", "vllm serve m"], None, "vLLM", FWD, False, "sh -c", V.SHELL_COMMAND),
    (["tini", "--", "bash", "-c", "vllm serve m"], None, "vLLM", FWD, False, "bash -c", V.SHELL_COMMAND),
    (["/entrypoint"], ["vllm", "serve", "m"], "vLLM", False, False, "/entrypoint", V.WRAPPER),
    (["/entrypoint"], ["vllm", "serve", "m"], "vLLM", FWD, True, "/entrypoint", None),
    (["run"], None, "vLLM", False, False, "run", V.WRAPPER),
    (["./run.sh"], None, "vLLM", False, False, "./run.sh", V.SCRIPT),
    (["sh", "/app/run.sh"], None, "vLLM", False, False, "sh /app/run.sh", V.SCRIPT),
    (["bash", "/app/start.sh", "--model", "m"], None, "vLLM", FWD, True, "bash /app/start.sh", None),
    (["tini", "--"], [], "vLLM", FWD, False, "tini", V.LAUNCHER_WITHOUT_PROGRAM),
    (["dumb-init", "--"], None, "vLLM", False, False, "dumb-init", V.LAUNCHER_WITHOUT_PROGRAM),
    (["env", "A=1"], None, "vLLM", FWD, False, "env", V.LAUNCHER_WITHOUT_PROGRAM),
    (["env", "-S", "vllm serve m"], None, "vLLM", False, False, "", V.HIDDEN_COMMAND_LINE),
    (["env", "--split-string=vllm serve m"], None, "vLLM", FWD, True, "", None),
    (["vllm serve m"], None, "vLLM", False, False, "", V.HIDDEN_COMMAND_LINE),
    (["tini", "--", "vllm serve m"], None, "vLLM", FWD, True, "", None),
    (None, ["serve", "--model", "m"], "vLLM", False, False, "", V.ARGS_WITHOUT_COMMAND),
    (None, ["serve", "--model", "m"], "vLLM", FWD, True, "", None),
    (None, ["sh", "-c", "vllm serve m"], "vLLM", FWD, False, "sh -c", V.SHELL_COMMAND),
    (None, None, "vLLM", FWD, False, "", V.NO_COMMAND),
    ([], [], "vLLM", False, False, "", V.NO_COMMAND),
    (["python3", "-m", "sglang.launch_server", "--model-path", "m"], None, "vLLM", FWD, False,
     "python3 -m sglang.launch_server", V.OTHER_ENGINE),
    (["text-generation-launcher", "--model-id", "m"], None, "vLLM", False, False, "text-generation-launcher",
     V.UNRECOGNISED_PROGRAM),
    (["numactl", "--cpunodebind=0", "vllm", "serve", "m"], None, "vLLM", FWD, True, "numactl", None),
    (["gosu", "app", "vllm", "serve", "m"], None, "vLLM", False, False, "gosu", V.UNRECOGNISED_PROGRAM),
    (["tini", "-z", "--", "vllm", "serve"], None, "vLLM", False, False, "tini", V.UNRECOGNISED_PROGRAM),
    # SGLang
    (["python3", "-m", "sglang.launch_server", "--model-path", "m"], None, "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["python", "-m", "sglang.launch_server"], ["--model-path", "m"], "SGLang", False, True,
     "python -m sglang.launch_server", None),
    (["python3.11", "-m", "sglang.launch_server"], None, "sglang", False, True, "python3.11 -m sglang.launch_server",
     None),
    (["/usr/bin/python3", "-u", "-m", "sglang.launch_server"], None, "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["dumb-init", "--", "python3", "-m", "sglang.launch_server", "--model-path", "m"], None, "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["python3"], ["-m", "sglang.launch_server", "--model-path", "m"], "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["python3", "-msglang.launch_server"], None, "SGLang", False, True, "python3 -m sglang.launch_server", None),
    (["python3", "-X", "faulthandler", "-W", "ignore", "-m", "sglang.launch_server"], None, "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["env", "PYTHONUNBUFFERED=1", "python3", "-m", "sglang.launch_server"], None, "SGLang", False, True,
     "python3 -m sglang.launch_server", None),
    (["vllm", "serve", "m"], None, "SGLang", FWD, False, "vllm", V.OTHER_ENGINE),
    (["sglang", "serve", "--model-path", "m"], None, "SGLang", False, False, "sglang", V.UNRECOGNISED_PROGRAM),
    (["python3", "-m", "sglang_router.launch_router"], None, "SGLang", False, False,
     "python3 -m sglang_router.launch_router", V.UNRECOGNISED_PROGRAM),
    (["python3", "launch.py", "--model-path", "m"], None, "SGLang", False, False, "python3 launch.py",
     V.UNRECOGNISED_PROGRAM),
    (["python3", "-c", "import sglang.launch_server"], None, "SGLang", False, False, "", V.HIDDEN_COMMAND_LINE),
    (["python3", "-c", "import runpy, sys; runpy.run_module('sglang.launch_server')"], None, "SGLang", FWD, True, "",
     None),
    (["python3"], None, "SGLang", FWD, False, "python3", V.LAUNCHER_WITHOUT_PROGRAM),
    (["python2", "-m", "sglang.launch_server"], None, "SGLang", False, False, "python2", V.UNRECOGNISED_PROGRAM),
    (["tini", "--", "bash", "-c", "python3 -m sglang.launch_server"], None, "SGLang", FWD, False, "bash -c",
     V.SHELL_COMMAND),
    (["/docker-entrypoint.sh", "python3", "-m", "sglang.launch_server"], None, "SGLang", False, False,
     "/docker-entrypoint.sh", V.SCRIPT),
    (["/docker-entrypoint.sh", "python3", "-m", "sglang.launch_server"], None, "SGLang", FWD, True,
     "/docker-entrypoint.sh", None),
    (None, ["python3", "-m", "sglang.launch_server"], "SGLang", False, False, "", V.ARGS_WITHOUT_COMMAND),
]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "args", "engine", "forwarded", "accepted", "program", "refusal"),
    COMMAND_LINES,
    ids=[" ".join([*(c or []), "|", *(a or [])]) + f" [{e}{' fwd' if f else ''}]" for c, a, e, f, *_ in COMMAND_LINES],
)
def test_real_world_command_lines(
    command: list[str] | None,
    args: list[str] | None,
    engine: str,
    forwarded: bool,
    accepted: bool,
    program: str,
    refusal: LaunchRefusal | None,
) -> None:
    verdict = parse_launch(command, args, engine, forwarded)
    assert (verdict.accepted, verdict.program, verdict.refusal) == (accepted, program, refusal), verdict.reason
    assert verdict.reason
    if accepted:
        recognised = program in ("vllm",) or program.endswith(" -m sglang.launch_server")
        assert verdict.args_forwarded is (forwarded and not recognised)
        assert verdict.append_to == ("args" if args else "command")


def test_the_table_covers_at_least_forty_command_lines() -> None:
    assert len(COMMAND_LINES) >= 40


def test_an_unsupported_engine_refuses_every_launch() -> None:
    verdict = parse_launch(["vllm", "serve"], None, "TGI", True)
    assert (verdict.accepted, verdict.refusal) == (False, V.UNSUPPORTED_ENGINE)


@pytest.mark.parametrize(
    ("token", "family", "reads_as_dtype"),
    [
        ("--kv-cache-dtype", Family.VLLM, True),
        ("--kv_cache_dtype=fp8", Family.VLLM, True),
        ("--kv_cache_dtype=fp8", Family.SGLANG, False),  # SGLang's parser does not fold underscores
        ("--kv-cache-dt", Family.SGLANG, True),
        ("--kv-cache-", Family.VLLM, False),  # ambiguous between several --kv-cache-* flags
        ("--kv-cache-dtype-x", Family.VLLM, False),
        ("-kv-cache-dtype", Family.VLLM, False),
        ("fp8", Family.VLLM, False),
    ],
)
def test_flag_spellings(token: str, family: Family, reads_as_dtype: bool) -> None:
    from gpuctl.core.kvcache import KV_CACHE_DTYPE

    assert names_flag(token, KV_CACHE_DTYPE, family) is reads_as_dtype


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
    assert result.warnings and "validate_kvcache_update skipped: RuntimeError: boom" in result.warnings[0]


def test_the_injection_fails_closed() -> None:
    result = admit_kvcache_pod(Exploding(), context())
    assert not result.allowed
    assert result.message == "internal error in admit_kvcache_pod: RuntimeError: boom"


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

"""What is written into the Pod, exactly, for each engine."""

from __future__ import annotations

import json

import pytest

from gpuctl.core.kvcache.keys import (
    ANNOTATION_CLIENT_CONFIG,
    ANNOTATION_INJECTED,
    ANNOTATION_MANUFACTURER,
    ANNOTATION_ROLE,
)
from tests.unit.kvcache.builders import (
    ENDPOINT,
    SGLANG_SERVER,
    VLLM_SERVER,
    admitted,
    container_of,
    context,
    env_of,
    file_config,
    kv_pod,
    pool_object,
    record,
    server,
)

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

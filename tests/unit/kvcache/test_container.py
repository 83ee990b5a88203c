"""The container the injection configures: choosing it, its field shapes, the launch check as the Pod sees it, and
the keys the injection owns."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuctl.core.kvcache.keys import (
    ANNOTATION_CONTAINER,
    ANNOTATION_FORWARDED,
)
from tests.unit.kvcache.builders import (
    SGLANG_SERVER,
    VLLM_SERVER,
    admit,
    admitted,
    container_of,
    context,
    kv_pod,
    record,
    refused,
    server,
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
        'spec.containers[0].command: Forbidden: "sh -c" is a shell command mode: the shell reads its commands from a '
        "string (or stdin), so appended arguments become the shell's positional parameters and never reach the "
        "engine, even with kvcache.gpustack.ai/launch-args-forwarded declared; launch the engine directly (vllm in command, its "
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

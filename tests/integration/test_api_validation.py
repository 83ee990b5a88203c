"""A manifest the API server refuses is refused by gpuctl first, in the API server's words: each manifest here goes
to the control plane's API server (a dry-run create) and through ``simulate`` and client ``webhook dry-run pod``,
and the three give the same refusal."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core.apivalidation import refusal

runner = CliRunner()


def pod(limits: dict[str, Any], requests: dict[str, Any] | None = None, name: str = "p", **container: Any) -> dict:
    resources: dict[str, Any] = {"limits": limits}
    if requests is not None:
        resources["requests"] = requests
    c = {"name": "c", "image": "busybox", "resources": resources, **container}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"containers": [{k: v for k, v in c.items() if v is not None}]},
    }


def deployment(limits: dict[str, Any]) -> dict:
    template = pod(limits)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": template["spec"]},
        },
    }


PLURALS = {"Pod": "/api/v1/namespaces/{ns}/pods", "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments"}


def server_refusal(api: Any, namespace: str, obj: dict) -> str | None:
    """The API server's own message for a dry-run create of ``obj`` (None when it would store it), read from its
    Status as it answers, through the client's connection pool."""
    from kubernetes.client.rest import ApiException

    url = api.configuration.host + PLURALS[obj["kind"]].format(ns=namespace) + "?dryRun=All"
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    try:
        raw = api.rest_client.request("POST", url, headers=headers, body=obj)
    except ApiException as exc:  # the 35 and 36 lines raise on an error status
        status, body = exc.status, exc.body
    else:
        if hasattr(raw, "read"):
            raw.read()
        status, body = raw.status, raw.data
    if 200 <= status < 300:
        return None
    message = json.loads(body)["message"]
    assert isinstance(message, str)
    return message


def same_refusal(ours: str, theirs: str) -> bool:
    """The same message, where several field errors may come in any order (the API server lists the resources of a
    container in its map's order, which varies from call to call)."""
    if ours == theirs:
        return True
    head, _, rest = ours.partition(": [")
    other_head, _, other_rest = theirs.partition(": [")
    if head != other_head or not rest.endswith("]") or not other_rest.endswith("]"):
        return False
    split = re.compile(r", (?=(?:spec|metadata)\.)")
    return sorted(split.split(rest[:-1])) == sorted(split.split(other_rest[:-1]))


REFUSED = {
    "two cards": pod({"nvidia.com/gpu": "two"}),
    "minus one card": pod({"nvidia.com/gpu": "-1"}),
    "one and a half cards": pod({"nvidia.com/gpu": "1.5"}),
    "a YAML float of cards": pod({"nvidia.com/gpu": 1.5}),
    "a request without a limit": pod({"cpu": "1"}, {"nvidia.com/gpu": "1"}),
    "a request other than the limit": pod({"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1"}),
    "negative memory": pod({"memory": "-1Gi"}),
    "a name that is no DNS name": pod({"nvidia.com/gpu": "1"}, name="Bad_Name"),
    "no image": pod({"nvidia.com/gpu": "1"}, image=None),
    "two faults at once": pod({"nvidia.com/gpu": "-1", "cpu": "-500m"}),
    "a Deployment's template": deployment({"nvidia.com/gpu": "0.5"}),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_the_api_server_refuses_gpuctl_refuses_in_its_words(
    case: str, api: Any, control_plane: Any, test_namespace: str, tmp_path: Path
) -> None:
    obj = REFUSED[case]
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(obj))
    theirs = server_refusal(api, test_namespace, obj)
    ours = refusal(obj)
    assert theirs is not None and ours is not None
    assert same_refusal(ours, theirs), f"\nours:   {ours}\ntheirs: {theirs}"

    result = runner.invoke(app, ["simulate", "-f", str(path), "--kubeconfig", str(control_plane.kubeconfig)])
    assert result.exit_code == 2 and ours in result.stderr, (result.exit_code, result.stdout, result.stderr)
    if obj["kind"] == "Pod":
        result = runner.invoke(
            app,
            ["webhook", "dry-run", "pod", "-f", str(path), "--kubeconfig", str(control_plane.kubeconfig)],
        )
        assert result.exit_code == 2 and ours in result.stderr, (result.exit_code, result.stdout, result.stderr)


def test_what_the_api_server_stores_gpuctl_does_not_refuse(api: Any, test_namespace: str) -> None:
    for obj in (pod({"nvidia.com/gpu": "2"}), pod({"nvidia.com/gpu": 2, "cpu": "1500m"}, {"nvidia.com/gpu": "2"})):
        assert server_refusal(api, test_namespace, obj) is None
        assert refusal(obj) is None

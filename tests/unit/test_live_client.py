"""The official client is loaded as gpuctl uses it: the modules of the raw request path, not every API and model;
whatever else asks for the client later gets all of it, as a plain import gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def run(code: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    result: dict[str, object] = json.loads(out.stdout.splitlines()[-1])
    return result


def test_a_connection_loads_the_request_path_only(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
    )
    got = run(
        "import json, sys\n"
        "from gpuctl.cluster.live import Connection, LiveSource\n"
        f"api = LiveSource(Connection({str(kubeconfig)!r}))._api()\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('kubernetes'))\n"
        "print(json.dumps({'loaded': loaded, 'host': api.configuration.host, 'type': type(api).__module__}))"
    )
    assert got["host"] == "https://127.0.0.1:1" and got["type"] == "kubernetes.client.api_client"
    loaded = got["loaded"]
    assert isinstance(loaded, list) and len(loaded) < 20
    assert not [m for m in loaded if m.startswith(("kubernetes.client.models.", "kubernetes.client.api."))]


def test_the_whole_client_is_there_for_whoever_asks() -> None:
    got = run(
        "import json\n"
        "from gpuctl.cluster.clientpackages import client_packages\n"
        "client, config = client_packages()\n"
        "import kubernetes\n"
        "from kubernetes import client as full, watch\n"
        "from kubernetes.client.models import V1ObjectMeta\n"
        "from kubernetes.client.rest import ApiException\n"
        "from kubernetes.utils import create_from_yaml, parse_quantity\n"
        "print(json.dumps({'yaml': callable(create_from_yaml), 'qty': str(parse_quantity('1Ki')),\n"
        "    'same': full is client, 'api': full.CoreV1Api.__name__, 'pod': full.V1Pod.__name__,\n"
        "    'meta': V1ObjectMeta(name='x').name, 'version': kubernetes.__version__, 'watch': watch.Watch.__name__,\n"
        "    'loader': config.load_kube_config_from_dict.__name__, 'exc': ApiException.__name__}))"
    )
    assert got == {
        "yaml": True,
        "qty": "1024",
        "same": True,
        "api": "CoreV1Api",
        "pod": "V1Pod",
        "meta": "x",
        "version": got["version"],
        "watch": "Watch",
        "loader": "load_kube_config_from_dict",
        "exc": "ApiException",
    }
    assert isinstance(got["version"], str) and got["version"].split(".")[0].isdigit()


def test_a_process_that_imported_the_client_keeps_it() -> None:
    got = run(
        "import json\n"
        "import kubernetes.client as plain\n"
        "from gpuctl.cluster.clientpackages import client_packages\n"
        "client, _ = client_packages()\n"
        "print(json.dumps({'same': client is plain}))"
    )
    assert got == {"same": True}

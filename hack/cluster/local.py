"""``make cluster`` / ``make cluster-down``: a real local control plane to try every gpuctl command on, writes included.

    python -m hack.cluster.local up     # etcd, kube-apiserver, Kueue and the operator, with the example pools loaded
    python -m hack.cluster.local down   # stop them and remove their files

It is the control plane the integration tests start (built from Go modules by hack/cluster/build.sh), kept running
in the background, with the operator serving its webhooks (registered by URL with the run's CA) and running its
controllers. The example pools are the objects of examples/snapshot: Nodes and their Devices ledgers, the Pods that
hold cards, the InstanceTypes, flavors and queues; their Workloads are submitted and judged for real.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("GPUCTL_LOCAL_CLUSTER", Path.home() / ".cache" / "gpuctl" / "local-cluster"))


def _say(text: str) -> None:
    sys.stderr.write(f"cluster: {text}\n")


def _load_examples(kubeconfig: Path) -> None:
    from gpuctl.cluster import kinds
    from gpuctl.cluster.live import Connection, LiveSource
    from testbed.example_snapshot import build

    source = LiveSource(Connection(str(kubeconfig), None, 30))
    objs = build()
    for ns in ("team-a", "team-b"):
        with contextlib.suppress(Exception):
            source.create(kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    def put(kind: Any, obj: dict[str, Any], *, status: bool) -> None:
        body = {k: v for k, v in obj.items() if k != "status"}
        ns = (obj.get("metadata") or {}).get("namespace") if kind.namespaced else None
        body.setdefault("apiVersion", kind.api_version)
        body["metadata"] = {k: v for k, v in body["metadata"].items() if k not in ("resourceVersion", "uid")}
        source.create(kind, body, namespace=ns)
        if status and obj.get("status"):
            source.patch(kind, obj["metadata"]["name"], {"status": obj["status"]}, namespace=ns, subresource="status")

    for n in objs["nodes"]:
        put(kinds.NODE, n, status=True)
        source.patch(kinds.NODE, n["metadata"]["name"], {"spec": {"taints": None}})
    for d in objs["devices"]:
        put(kinds.DEVICES, d, status=True)
    for it in objs["instancetypes"]:
        put(kinds.INSTANCETYPE, it, status=False)
    for o in objs["kueue"]:
        kind = next(k for k in kinds.ALL if k.kind == o["kind"])
        if kind is kinds.ADMISSIONCHECK:
            continue  # the operator creates it and keeps it Active
        put(kind, o, status=False)
    for q in objs["clusterqueues"]:
        put(kinds.CLUSTERQUEUE, q, status=False)
    for p in objs["pods"]:
        put(kinds.POD, p, status=True)
    for w in objs["workloads"]:
        put(kinds.WORKLOAD, w, status=False)


def up() -> int:
    from gpuctl.operator.manifests import webhook_configurations
    from testbed import controlplane as cpmod
    from testbed.operator_process import operator_argv, serving_secret

    if (STATE / "state.json").exists():
        _say(f"already running; `make cluster-down` first (state in {STATE})")
        print(f"export KUBECONFIG={STATE / 'cp' / 'kubeconfig'}")
        return 0
    STATE.mkdir(parents=True, exist_ok=True)
    _say("building the control plane binaries (the first time takes several minutes)")
    subprocess.run([str(ROOT / "hack" / "cluster" / "build.sh")], check=True, stdout=subprocess.DEVNULL)
    cpmod.Process.detached = True
    cp = cpmod.ControlPlane(work_dir=STATE / "cp", bin_dir=cpmod.bin_dir())
    cp.start()
    pids = [p.pid for p in cp.processes if p.pid]
    work = STATE / "operator"
    work.mkdir(exist_ok=True)
    pair = cp.serving_cert(["127.0.0.1", "localhost"])
    (work / "tls.crt").write_bytes(pair.cert_pem)
    (work / "tls.key").write_bytes(pair.key_pem)
    port = cpmod.free_port()
    log = (work / "operator.log").open("ab")
    # As deployed: the operator leads by its Lease in gpuctl-system, whose serving Secret holds the CA (as cert-manager
    # writes it), so `gpuctl doctor` finds the deployment as the design has it.
    from kubernetes import client, config

    from gpuctl.core import naming

    api = config.new_client_from_config(config_file=str(cp.kubeconfig))
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": naming.OPERATOR_NAMESPACE}})
    core.create_namespaced_secret(
        naming.OPERATOR_NAMESPACE, serving_secret(cp.ca_cert_pem, pair.cert_pem, pair.key_pem)
    )
    operator = subprocess.Popen(
        [*operator_argv(cp.kubeconfig, port, work), "--leader-elect", f"--namespace={naming.OPERATOR_NAMESPACE}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
        start_new_session=True,
    )
    pids.append(operator.pid)
    (STATE / "state.json").write_text(json.dumps({"pids": pids, "kubeconfig": str(cp.kubeconfig)}))
    adm = client.AdmissionregistrationV1Api(api)
    configs = webhook_configurations(
        ca_bundle=base64.b64encode(cp.ca_cert_pem).decode(), url=f"https://127.0.0.1:{port}"
    )
    adm.create_mutating_webhook_configuration(configs[0])
    adm.create_validating_webhook_configuration(configs[1])
    deadline = time.monotonic() + 60
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cadata=cp.ca_cert_pem.decode())
    while True:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=2, context=ctx) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline or operator.poll() is not None:
            _say(f"the operator did not become ready; log: {work / 'operator.log'}")
            down()
            return 1
        time.sleep(0.3)
    time.sleep(1)  # the API server picks up webhook configurations asynchronously
    _load_examples(cp.kubeconfig)
    _say(f"ready: etcd, kube-apiserver, Kueue and the operator (logs in {STATE}); the example pools are loaded")
    print(f"export KUBECONFIG={cp.kubeconfig}")
    return 0


def down() -> int:
    import shutil

    state = STATE / "state.json"
    if state.exists():
        for pid in json.loads(state.read_text()).get("pids", []):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        time.sleep(1)
        for pid in json.loads(state.read_text()).get("pids", []):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(STATE, ignore_errors=True)
    _say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit({"up": up, "down": down}.get(sys.argv[1] if len(sys.argv) > 1 else "", lambda: 2)())

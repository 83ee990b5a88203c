"""The read side on the real control plane with Kueue: the same answers live and on a `gpuctl dump` of the cluster,
and `explain` naming the gate that holds each Workload."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from typer.testing import CliRunner

from gpuctl.cli.main import app
from gpuctl.core import naming
from gpuctl.core.units import M
from testbed.factories import card_row
from testbed.gpucluster import GpuPool, condition, new_pool, wait_for

runner = CliRunner()


def gpuctl(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def pool(api: Any, test_namespace: str) -> Iterator[GpuPool]:
    half = [card_row(c, mode=3, allocated=M // 2, slices=1) for c in range(4)]
    p = new_pool(api, test_namespace, ledgers={0: half, 1: half})
    try:
        # The published ledgers and the allocation records of the Pods holding the slices agree.
        for node in p.nodes:
            for c in range(4):
                p.allocated_pod(f"slice-{node}-{c}", node, [{"id": f"GPU-{c:04d}", "mode": 3, "allocated": M // 2}])
        p.submit("held-quota", {"nvidia.com/gpu": "9"})
        p.submit("held-fit", {"nvidia.com/gpu": "2"})
        p.submit("held-pod", {"nvidia.com/gpu": "1"})
        wait_for(
            "held-fit and held-pod reserve quota",
            lambda: all(
                (condition(p.workload(w), "QuotaReserved") or {}).get("status") == "True"
                for w in ("held-fit", "held-pod")
            ),
        )
        p.set_check("held-pod", "Ready", "the assigned flavor pool has enough free cards to place the request")
        wait_for(
            "held-pod admitted", lambda: (condition(p.workload("held-pod"), "Admitted") or {}).get("status") == "True"
        )
        client.CoreV1Api(api).create_namespaced_pod(
            test_namespace,
            {
                "metadata": {
                    "name": "held-pod-0",
                    "labels": {naming.LABEL_PODSET: "main"},
                    "annotations": {naming.ANNOTATION_WORKLOAD: "held-pod"},
                },
                "spec": {
                    "containers": [
                        {"name": "main", "image": "gpuctl-it/none", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ]
                },
            },
        )
        p.created.append(("pod", "held-pod-0", test_namespace))
        yield p
    finally:
        p.cleanup()


@pytest.fixture(scope="module")
def dumped(pool: GpuPool, control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("dump")
    code, _, err = gpuctl("dump", str(target), "--kubeconfig", str(control_plane.kubeconfig))
    assert code == 0, err
    assert "wrote" in err
    return target


def live(control_plane: Any, *args: str) -> Any:
    code, out, err = gpuctl(*args, "--kubeconfig", str(control_plane.kubeconfig))
    assert code in (0, 3), err
    return json.loads(out)


def offline(snapshot: Path, *args: str) -> Any:
    code, out, err = gpuctl(*args, "--snapshot", str(snapshot))
    assert code in (0, 3), err
    return json.loads(out)


def test_views_are_computed_from_the_live_ledger(pool: GpuPool, control_plane: Any) -> None:
    [item] = live(control_plane, "views", pool.name, "-o", "json")["items"]
    assert item["entrance"] == pool.entrance
    assert item["accelerator"] == {"onceMaxRequest": 0, "remaining": 0, "capacity": 8}
    assert item["acceleratorSliced"] == {"onceMaxRequest": 50, "remaining": 400, "capacity": 800}


@pytest.mark.parametrize(
    "args",
    [
        ("views", "-o", "json"),
        ("views", "--by-card", "-o", "json"),
        ("partitions", "-o", "json"),
        ("workloads", "-A", "-o", "json"),
        ("explain", "workload", "held-quota", "-o", "json"),
        ("explain", "workload", "held-fit", "-o", "json"),
        ("explain", "workload", "held-pod", "-o", "json"),
        ("explain", "pod", "held-pod-0", "-o", "json"),
    ],
)
def test_live_and_dump_give_the_same_answer(
    pool: GpuPool, control_plane: Any, tmp_path: Path, args: tuple[str, ...]
) -> None:
    scoped = (*args, "-n", pool.namespace) if args[0] == "explain" else args
    # Kueue keeps writing status (requeue counts, messages): compare a live answer with a dump taken right after it,
    # and read again if the cluster moved in between.
    for attempt in range(3):
        answer = live(control_plane, *scoped)
        target = tmp_path / f"dump-{attempt}"
        assert gpuctl("dump", str(target), "--kubeconfig", str(control_plane.kubeconfig))[0] == 0
        if answer == offline(target, *scoped):
            return
    assert answer == offline(target, *scoped)


@pytest.mark.parametrize(("workload", "gate"), [("held-quota", 2), ("held-fit", 3), ("held-pod", 4)])
def test_explain_names_the_gate(pool: GpuPool, control_plane: Any, workload: str, gate: int) -> None:
    data = live(control_plane, "explain", "workload", f"{pool.namespace}/{workload}", "-o", "json")
    assert data["heldBy"] == gate, data
    if gate == 3:
        assert "whole cards" in data["gates"][2]["summary"] and "all 4 hold slices" in data["gates"][2]["summary"]


def test_dump_never_writes_secrets_and_reads_back(dumped: Path) -> None:
    names = sorted(p.name for p in dumped.iterdir())
    assert "secrets.json" not in names and "devices.json" in names and "workloads.json" in names
    kinds = {
        item.get("kind")
        for p in dumped.iterdir()
        if p.suffix == ".json"
        for item in json.loads(p.read_text()).get("items", [])
    }
    assert "Secret" not in kinds and "ConfigMap" in kinds  # Kueue's Configuration, the one ConfigMap a dump reads


def test_a_dump_records_the_versions_it_was_taken_from(dumped: Path, control_plane: Any) -> None:
    [record] = json.loads((dumped / "dump.json").read_text())["items"]
    versions = control_plane.versions
    assert record["kubernetesVersion"] == versions.kubernetes
    # Kueue runs as a process here (no manager Deployment): its Workload CRD's fields tell its minor.
    minor = ".".join(versions.kueue.split(".")[:2])
    assert record["kueueVersion"] == {"version": f"{minor}.0", "source": "the fields of CRD workloads.kueue.x-k8s.io"}
    result = CliRunner().invoke(app, ["doctor", "--snapshot", str(dumped), "--no-probe", "-o", "json"])
    found = {i["check"]: i for i in json.loads(result.stdout)["items"]}
    assert found["kubernetes-version"]["status"] == found["kueue-version"]["status"] == "ok"


def test_a_user_without_rights_is_told_what_is_forbidden(pool: GpuPool, control_plane: Any, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "nobody.kubeconfig"
    control_plane.write_kubeconfig(kubeconfig, "nobody", [])
    code, out, err = gpuctl("views", "--kubeconfig", str(kubeconfig))
    assert code == 1 and out == ""
    assert err.startswith("error: forbidden: cannot list instancetypes.worker.gpustack.ai") and err.count("\n") == 1


def test_an_unreachable_cluster_is_one_line(tmp_path: Path, control_plane: Any) -> None:
    text = Path(control_plane.kubeconfig).read_text().replace(control_plane.api_url, "https://127.0.0.1:9")
    kubeconfig = tmp_path / "down.kubeconfig"
    kubeconfig.write_text(text)
    code, _, err = gpuctl("views", "--kubeconfig", str(kubeconfig), "--request-timeout", "2s")
    assert (
        code == 1
        and err.startswith("error: cannot reach the API server at https://127.0.0.1:9")
        and err.count("\n") == 1
    )


def test_unknown_objects_suggest_close_names(pool: GpuPool, control_plane: Any) -> None:
    code, _, err = gpuctl(
        "explain", "workload", f"{pool.namespace}/held-fitt", "--kubeconfig", str(control_plane.kubeconfig)
    )
    assert code == 1 and f"did you mean {pool.namespace}/held-fit?" in err


def test_an_api_that_is_not_served_names_the_missing_piece(control_plane: Any) -> None:
    from gpuctl.cluster.errors import SourceError
    from gpuctl.cluster.kinds import Kind
    from gpuctl.cluster.live import Connection, LiveSource

    source = LiveSource(Connection(str(control_plane.kubeconfig)))
    with pytest.raises(
        SourceError, match=r"^the Gadget API is not served by this cluster: is the operator installed\?$"
    ):
        source.list(Kind("Gadget", "worker.gpustack.ai", "v1alpha1", "gadgets", False))


def test_watch_redraws_when_the_ledger_moves(api: Any, test_namespace: str, control_plane: Any) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    p = new_pool(api, test_namespace, nodes=1, cards=4, nominal_cards=4)
    gpuctl_bin = str(Path(sys.executable).with_name("gpuctl"))
    proc = subprocess.Popen(
        [
            gpuctl_bin,
            "views",
            p.name,
            "-w",
            "--interval",
            "0.3",
            "--no-headers",
            "--kubeconfig",
            str(control_plane.kubeconfig),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # Ctrl-C as a terminal's foreground job gets it: a suite started in the background inherits SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode()
        assert "4/4 4/40 100/400 0/0" in first
        p.write_ledger(p.nodes[0], [card_row(0, mode=1, allocated=M), card_row(1), card_row(2), card_row(3)])
        deadline = time.monotonic() + 20
        line = ""
        while time.monotonic() < deadline and "3/3 3/30 100/300 0/0" not in line:
            line = proc.stdout.readline().decode()
        assert "3/3 3/30 100/300 0/0" in line
    finally:
        # The pool goes whatever happened above: a ClusterQueue left behind holds the AdmissionCheck's finalizer.
        try:
            proc.send_signal(signal.SIGINT)
            code = proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            p.cleanup()
    assert code == 0


def test_dump_is_private_whole_and_redacted(pool: GpuPool, control_plane: Any, tmp_path: Path) -> None:
    from kubernetes import client

    client.CoreV1Api(pool.api).create_namespaced_pod(
        pool.namespace,
        {
            "metadata": {
                "name": "with-secrets",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": '{"spec": "password=hunter2"}'},
            },
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "gpuctl-it/none",
                        "args": ["serve", "--api-key=abc123", "--password", "hunter2", "--port", "80"],
                        "env": [{"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "MODE", "value": "fast"}],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ]
            },
        },
    )
    pool.created.append(("pod", "with-secrets", pool.namespace))
    target = tmp_path / "dump"
    kubeconfig = str(control_plane.kubeconfig)
    assert gpuctl("dump", str(target), "--kubeconfig", kubeconfig)[0] == 0
    assert target.stat().st_mode & 0o777 == 0o700
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in target.iterdir())
    text = (target / "pods.json").read_text()
    assert "hunter2" not in text and "abc123" not in text
    [pod] = [p for p in json.loads(text)["items"] if p["metadata"]["name"] == "with-secrets"]
    c = pod["spec"]["containers"][0]
    assert c["args"] == ["serve", "--api-key=<redacted>", "--password", "<redacted>", "--port", "80"]
    assert [e["value"] for e in c["env"]] == ["<redacted>", "<redacted>"]
    # A dump never mixes with an older one: a non-empty directory needs --overwrite, which replaces it whole — and
    # only when it holds nothing but that dump.
    code, _, err = gpuctl("dump", str(target), "--kubeconfig", kubeconfig)
    assert code == 2 and "--overwrite" in err
    (target / "stale.json").write_text("{}")
    code, _, err = gpuctl("dump", str(target), "--overwrite", "--kubeconfig", kubeconfig)
    assert code == 2 and "stale.json is not part of the dump" in err
    (target / "stale.json").unlink()
    assert gpuctl("dump", str(target), "--overwrite", "--no-redact", "--kubeconfig", kubeconfig)[0] == 0
    assert "hunter2" in (target / "pods.json").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["dump"]  # no staging directory left behind


def test_fleet_views_sum_clusters_count_one_cluster_once_and_survive_a_dead_one(
    pool: GpuPool, control_plane: Any, tmp_path: Path
) -> None:
    """Contexts of one kubeconfig: "alias" reaches the test cluster exactly as the first context does (the same
    address and CA), so it is counted once, with a warning; "other" reaches it at another address (localhost, which its
    certificate also names), so it counts as a second cluster and views, fragmentation and partitions sum the pool over
    both, `--by-cluster` gives one row per context; "dead" answers nothing: an error row, the others still printed,
    exit 1."""
    import yaml

    config = yaml.safe_load(Path(control_plane.kubeconfig).read_text())
    first = config["contexts"][0]
    [cluster] = config["clusters"]
    config["clusters"] += [
        {"name": "other", "cluster": {**cluster["cluster"], "server": control_plane.api_url.replace("127.0.0.1", "localhost")}},
        {"name": "dead", "cluster": {**cluster["cluster"], "server": "https://127.0.0.1:1"}},
    ]  # fmt: skip
    config["contexts"] += [
        {"name": "alias", "context": dict(first["context"])},
        {"name": "other", "context": {**first["context"], "cluster": "other"}},
        {"name": "dead", "context": {**first["context"], "cluster": "dead"}},
    ]
    kubeconfig = tmp_path / "contexts"
    kubeconfig.write_text(yaml.safe_dump(config))

    def run(*args: str, contexts: tuple[str, ...] = (first["name"], "other")) -> Any:
        flags = [w for c in contexts for w in ("--context", c)]
        code, out, err = gpuctl(*args, *flags, "--kubeconfig", str(kubeconfig))
        assert code == 0, err
        return json.loads(out)

    [single] = live(control_plane, "views", pool.name, "-o", "json")["items"]
    [summed] = run("views", pool.name, "-o", "json")["items"]
    assert summed["clusters"] == [first["name"], "other"]
    for view in ("accelerator", "acceleratorShared", "acceleratorSliced"):
        assert summed[view]["remaining"] == 2 * single[view]["remaining"]
        assert summed[view]["capacity"] == 2 * single[view]["capacity"]
        assert summed[view]["onceMaxRequest"] == single[view]["onceMaxRequest"]
    rows = run("views", pool.name, "--by-cluster", "-o", "json")["items"]
    assert sorted(r["cluster"] for r in rows) == sorted([first["name"], "other"])
    assert all(r["accelerator"] == single["accelerator"] for r in rows)
    [frag] = [i for i in run("fragmentation", pool.name, "-o", "json")["items"] if i["name"] == pool.name]
    [alone] = live(control_plane, "fragmentation", pool.name, "-o", "json")["items"]
    assert frag["views"]["acceleratorSliced"]["free"] == 2 * alone["views"]["acceleratorSliced"]["free"]
    queued = run("queue", "-o", "json")["items"]
    assert {i["cluster"] for i in queued} <= {first["name"], "other"}
    assert run("partitions", "-o", "json")["kind"] == "ProfileAvailabilityList"
    # The same cluster under two names is counted once.
    code, out, err = gpuctl("views", pool.name, "-o", "json", "--context", first["name"], "--context", "alias",
                            "--kubeconfig", str(kubeconfig))  # fmt: skip
    assert code == 0 and json.loads(out)["items"][0]["accelerator"] == single["accelerator"], err
    assert err == (
        f"warning: contexts {first['name']} and alias reach the same cluster ({control_plane.api_url});"
        f" counting it once, as {first['name']}\n"
    )
    # A dead context: its error row, the other clusters' rows, exit 1 once all is printed.
    every = ["--all-contexts", "--kubeconfig", str(kubeconfig), "--request-timeout", "3s"]
    code, out, err = gpuctl("views", pool.name, *every)
    assert code == 1 and "error: 1 context(s) could not be read: dead" in err
    dead = [line for line in out.splitlines() if line.split()[1:2] == ["dead"]]
    assert len(dead) == 1 and "error: cannot reach the API server at https://127.0.0.1:1" in dead[0], out
    assert any(line.startswith(pool.name) for line in out.splitlines())
    code, out, err = gpuctl("views", pool.name, *every, "-o", "json")
    listed = json.loads(out)
    assert code == 1 and listed["items"][0]["clusters"] == ["alias", "other"]  # the first name of the test cluster
    assert [e["context"] for e in listed["errors"]] == ["dead"]
    for command in (["partitions"], ["fragmentation", pool.name], ["queue"]):
        code, out, err = gpuctl(*command, *every, "-o", "json")
        assert code == 1 and [e["context"] for e in json.loads(out)["errors"]] == ["dead"], (command, err)
    code, _, err = gpuctl("workloads", "-A", "--context", "a", "--context", "b", "--kubeconfig", str(kubeconfig))
    assert code == 2 and "reads one cluster" in err


def test_queue_order_matches_kueues_visibility_api(api: Any, test_namespace: str, control_plane: Any) -> None:
    """Twelve Workloads wait in a queue whose quota holds none of them, at three priorities: `gpuctl queue` lists them
    in the order Kueue's visibility API gives, and its own computation of that order agrees."""
    from gpuctl.cluster.live import Connection, LiveSource

    pool = new_pool(api, test_namespace, nodes=1, cards=4, nominal_cards=1)
    try:
        names = []
        for i in range(12):
            name = pool.submit(f"wait-{i:02d}", {"nvidia.com/gpu": "2"})
            pool.objs.patch_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", test_namespace, "workloads", name, {"spec": {"priority": (i % 3) * 10}}
            )
            names.append(name)
        source = LiveSource(Connection(str(control_plane.kubeconfig)))

        def listed() -> list[str] | None:
            items = source.pending_workloads(pool.name)
            got = [i["metadata"]["name"] for i in items or []]
            return got if len(got) == 12 else None

        kueue_order = wait_for("Kueue lists the twelve pending Workloads", listed, timeout=60)
        priorities = {n: (int(n.split("-")[1]) % 3) * 10 for n in names}
        assert [priorities[n] for n in kueue_order] == sorted(priorities.values(), reverse=True)  # across priorities
        code, out, err = gpuctl("queue", pool.name, "-o", "json", "--kubeconfig", str(control_plane.kubeconfig))
        assert code == 0, err
        items = json.loads(out)["items"]
        assert [i["name"] for i in items] == kueue_order
        assert {i["orderFrom"] for i in items} == {"visibility"}
        assert [i["position"] for i in items] == list(range(1, 13))
        # The order gpuctl computes where the API is not served is the same.
        from gpuctl.cli.commands.queue import cluster_queue_map
        from gpuctl.cluster import read
        from gpuctl.core.queueing import pending_order

        state = read.simulation_state(source)
        computed = pending_order(state.workloads, cluster_queue_map(state), pool.name)
        assert [w.name for w in computed] == kueue_order
    finally:
        pool.cleanup()

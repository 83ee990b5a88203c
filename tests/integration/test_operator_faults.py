"""The operator under faults, on the real control plane: watches that break, an API server that goes silent, a flood
of slow connections beside an oversized review, and fuzzed reviews.

The operator here talks to the API server through a TCP proxy the test controls (cut every connection, or
black-hole the server), and serves its webhooks directly to the test.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from gpuctl.core import naming
from gpuctl.core.units import M
from gpuctl.core.webhooks import REGISTRY
from testbed.factories import card_row, container, instancetype, pod
from testbed.gpucluster import WORKER, WV, new_pool, wait_for
from testbed.operator_process import Operator, running_operator
from testbed.proxy import Proxy
from testbed.request_examples import EXAMPLES

STALE_AFTER = 4


@pytest.fixture(scope="module")
def proxy(control_plane: Any) -> Iterator[Proxy]:
    p = Proxy(("127.0.0.1", control_plane.api_port))
    yield p
    p.close()


@pytest.fixture(scope="module")
def faulty(control_plane: Any, proxy: Proxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    """An operator whose API server connections go through the proxy."""
    work = tmp_path_factory.mktemp("faulty-operator")
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    with running_operator(
        control_plane,
        work,
        "--watch-seconds",
        "5",
        "--stale-after",
        str(STALE_AFTER),
        "--request-timeout",
        "2",
        kubeconfig=kubeconfig,
    ) as op:
        yield op


def review(obj: dict[str, Any], uid: str, operation: str = "CREATE") -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": uid, "operation": operation, "object": obj},
        }
    ).encode()


def status(pool: Any) -> dict[str, Any]:
    result: dict[str, Any] = (
        pool.objs.get_cluster_custom_object(WORKER, WV, "instancetypes", pool.name).get("status") or {}
    )
    return result


# ----------------------------------------------------------------------------------------------- broken watches


def test_a_broken_watch_recovers_without_losing_an_event(
    faulty: Operator, proxy: Proxy, api: Any, test_namespace: str
) -> None:
    pool = new_pool(api, test_namespace, nodes=1, cards=4, nominal_cards=4, check=False)
    try:
        wait_for("free views published", lambda: status(pool).get("accelerator", {}).get("remaining") == 4, timeout=30)
        for taken in range(1, 4):
            assert proxy.cut() > 0  # every watch (and any call in flight) breaks
            # The change lands while the operator's watches are down: it must still arrive, by resume or re-list.
            pool.write_ledger(
                pool.nodes[0], [card_row(c, mode=1, allocated=M) if c < taken else card_row(c) for c in range(4)]
            )
            wait_for(
                f"views after {taken} card(s) taken",
                lambda taken=taken: status(pool).get("accelerator", {}).get("remaining") == 4 - taken,  # type: ignore[misc]
                timeout=30,
            )
        node = client.CoreV1Api(api).read_node(pool.nodes[0])
        assert node.metadata.labels[naming.shared_fit_label(pool.accelerator_key)] == "1"
        metrics = faulty.get("/metrics")[1].decode()
        assert 'gpuctl_cache_synced{kind="devices"} 1.0' in metrics
    finally:
        pool.cleanup()


# ----------------------------------------------------------------------------------------------- a silent API server


def test_with_the_api_server_black_holed_reviews_answer_in_time_and_health_says_so(
    faulty: Operator, proxy: Proxy, api: Any
) -> None:
    objs = client.CustomObjectsApi(api)
    it = instancetype()
    it.pop("status")
    it["metadata"]["name"] = "blackhole-a10g"
    it["metadata"]["labels"] = {}
    objs.create_cluster_custom_object(WORKER, WV, "instancetypes", it)
    known_queue = naming.queue_entrance("blackhole-a10g")
    try:
        wait_for("the type cached", lambda: b"webhook-cache ok" in faulty.get("/readyz?verbose")[1], timeout=20)
        time.sleep(1.5)
        proxy.blackhole()
        slice_pod = pod(
            [container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "25"})],
            queue=known_queue,
        )
        # A slice sized in MiB needs its InstanceType's card memory: a queue no cached type fronts is refused.
        unknown = pod(
            [container("main", {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "4096"})],
            queue=naming.queue_entrance("nowhere"),
        )
        for obj, allowed in ((slice_pod, True), (unknown, False)):
            code, data = faulty.post("/mutate-pod-accelerators", review(obj, "bh"))
            answer = json.loads(data)["response"]
            # Answered from the cache: a review that waited on the silent server would end in the deadline's
            # refusal ("no answer within"), not in the webhook's own verdict.
            assert code == 200 and answer["uid"] == "bh" and answer["allowed"] is allowed, answer
            assert "no answer within" not in str(answer.get("status", {}).get("message", "")), answer
        wait_for(
            "readiness to say the API server is silent",
            lambda: faulty.get("/readyz")[0] == 503,
            timeout=STALE_AFTER + 20,
        )
        code, text = faulty.get("/readyz?verbose")
        assert code == 503 and b"[-]api-contact failed" in text
        assert faulty.get("/healthz")[0] == 200  # not stuck: every call the controllers make times out
    finally:
        proxy.restore()
        objs.delete_cluster_custom_object(WORKER, WV, "instancetypes", "blackhole-a10g")
    wait_for("ready again", lambda: faulty.get("/readyz")[0] == 200, timeout=30)


# ----------------------------------------------------------------------------------------------- floods


def _slow_connections(op: Operator, count: int) -> list[ssl.SSLSocket]:
    ctx = ssl.create_default_context(cafile=str(op.ca_file))
    opened: list[ssl.SSLSocket] = []
    lock = threading.Lock()

    def open_some(n: int) -> None:
        for _ in range(n):
            try:
                raw = socket.create_connection(("127.0.0.1", op.port), timeout=10)
                tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
                tls.sendall(b"POST /mutate-pod-accelerators HTTP/1.1\r\nHost: x\r\n")
            except OSError:
                continue
            with lock:
                opened.append(tls)

    threads = [threading.Thread(target=open_some, args=(count // 8,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return opened


def _oversized_review(op: Operator, result: dict[str, Any]) -> None:
    ctx = ssl.create_default_context(cafile=str(op.ca_file))
    body = review({"kind": "Pod", "metadata": {"name": "huge", "annotations": {"x": "y" * (8 * 1024 * 1024)}}}, "huge")
    conn = http.client.HTTPSConnection("127.0.0.1", op.port, context=ctx, timeout=30)
    try:
        conn.request("POST", "/mutate-pod-accelerators", body=body, headers={"Content-Type": "application/json"})
        result["answer"] = json.loads(conn.getresponse().read())["response"]
    except OSError as exc:
        result["error"] = str(exc)


def test_slow_connections_and_an_oversized_review_leave_good_reviews_answered(faulty: Operator, api: Any) -> None:
    objs = client.CustomObjectsApi(api)
    it = instancetype("flood-a10g")
    it.pop("status")
    objs.create_cluster_custom_object(WORKER, WV, "instancetypes", it)
    try:
        wait_for("the type cached", lambda: _known(faulty, "flood-a10g"), timeout=20)
        _flood(faulty)
    finally:
        objs.delete_cluster_custom_object(WORKER, WV, "instancetypes", "flood-a10g")


def _known(op: Operator, name: str) -> bool:
    """Whether the operator's cache holds the type: a slice sized in MiB is sized by the InstanceType behind its
    queue, and the answer says when no cached InstanceType carries that queue."""
    limits = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-mib": "4096"}
    p = pod([container("main", limits)], queue=naming.queue_entrance(name))
    code, data = op.post("/mutate-pod-accelerators", review(p, "probe"))
    answer = json.loads(data)["response"]
    return code == 200 and "no InstanceType carries" not in str((answer.get("status") or {}).get("message", ""))


def _flood(faulty: Operator) -> None:
    accept = next(e for e in EXAMPLES if e.id == "rule2-accept")
    accept_pod = json.loads(json.dumps(accept.pod))
    accept_pod["metadata"]["labels"][naming.LABEL_QUEUE_NAME] = naming.queue_entrance("flood-a10g")
    good = review(accept_pod, "good")
    ctx = ssl.create_default_context(cafile=str(faulty.ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", faulty.port, context=ctx, timeout=10)
    conn.request("POST", "/mutate-pod-accelerators", body=good, headers={"Content-Type": "application/json"})
    conn.getresponse().read()
    slow = _slow_connections(faulty, 3600)
    assert len(slow) >= 3500, len(slow)
    oversized: dict[str, Any] = {}
    big = threading.Thread(target=_oversized_review, args=(faulty, oversized))
    big.start()
    peak = faulty.rss_mib()
    # Every good review sent while the slow connections are held and the oversized review is read is answered, and
    # answered as it is when calm (how fast is measured by `make bench`, not here).
    for i in range(400):
        conn.request("POST", "/mutate-pod-accelerators", body=good, headers={"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())["response"]
        assert answer["uid"] == "good" and answer["allowed"] is True, answer
        if i % 20 == 0:
            peak = max(peak, faulty.rss_mib())
        time.sleep(0.02)
    big.join(60)
    assert peak < 512, f"peak RSS {peak:.0f} MiB"
    answer = oversized.get("answer")
    if answer is not None:  # the server may close before the client finishes sending 8 MB
        assert answer["uid"] == "huge" and answer["allowed"] is False and "larger than" in answer["status"]["message"]
    for s in slow:
        s.close()


def _fuzz_object(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.random()
    if depth > 4 or choice < 0.3:
        return rng.choice([None, True, 0, -1, 1.5, "", "x" * rng.randint(0, 40), "1", "nvidia.com/gpu", [], {}])
    if choice < 0.55:
        return [_fuzz_object(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = ["metadata", "spec", "labels", "containers", "resources", "limits", "name", "kind", "podSets", "type", "x"]
    return {rng.choice(keys): _fuzz_object(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def _fuzz_body(rng: random.Random, uid: str) -> bytes:
    shape = rng.random()
    if shape < 0.2:  # the envelope right, the request's parts wrong
        return review(_fuzz_object(rng), uid, rng.choice(["CREATE", "UPDATE", "DELETE", "", "x"]))
    if shape < 0.4:  # a Pod with garbage where its resources go
        p = pod([container("main", {"nvidia.com/gpu.sliced": _fuzz_object(rng)})])
        p["spec"]["containers"].append(_fuzz_object(rng))
        return review(p, uid)
    if shape < 0.6:  # cut short somewhere after the uid
        whole = review(pod([container("main", {"nvidia.com/gpu": "1"})]), uid)
        after_uid = whole.index(uid.encode()) + len(uid) + 1
        return whole[: rng.randint(after_uid, len(whole) - 1)]
    if shape < 0.8:  # a request that is not an object, or fields of the wrong type
        request = {"uid": uid, "operation": "CREATE", "object": _fuzz_object(rng), "oldObject": _fuzz_object(rng)}
        return json.dumps({"request": request, "kind": _fuzz_object(rng)}).encode()
    obj = _fuzz_object(rng)
    if isinstance(obj, dict):
        obj["kind"] = rng.choice(["Pod", "Workload", "Instance", "InstanceType"])
        obj["metadata"] = {
            "labels": {naming.LABEL_QUEUE_NAME: "gpustack-fnv64-" + "0" * 16, "kvcache.gpustack.ai/inject": "true"}
        }
    return review(obj, uid, "UPDATE" if rng.random() < 0.3 else "CREATE")


WRONG_TYPES: dict[str, list[Any]] = {
    "uid": [None, 0, 7, 1.5, True, [], ["u"], {}, {"uid": "u"}, ""],
    "operation": [None, 0, True, [], {}, ["CREATE"], "", "create", "PATCH"],
    "object": [0, 1.5, True, "x", [], [{"kind": "Pod"}]],
    "oldObject": [0, True, "x", [], [{}]],
    "namespace": [0, True, [], {"name": "x"}],
    "name": [0, False, [], {}],
    "kind": [0, "Pod", [], True],
    "resource": [0, "pods", [{}]],
    "userInfo": [0, "alice", ["alice"]],
    "dryRun": [0, "true", [], {}],
}
"""Values of the wrong type (or missing, as ``None`` for uid and operation) for each field of a request."""


def _malformed_envelope(rng: random.Random, uid: str) -> bytes:
    """A review the API server would never send: one or more request fields missing or of the wrong type, the rest
    random (whatever else is wrong with it, it is malformed)."""
    operation = rng.choice(["CREATE", "UPDATE"])
    request: dict[str, Any] = {
        "uid": uid,
        "operation": operation,
        "namespace": "default",
        "object": pod([container("main", {"nvidia.com/gpu.sliced": "1"})]),
        "oldObject": _fuzz_object(rng) if operation == "CREATE" else {"kind": "Pod"},
    }
    for field in rng.sample(sorted(WRONG_TYPES), rng.randint(1, 3)):
        value = rng.choice(WRONG_TYPES[field])
        if field in ("uid", "operation", "object") and rng.random() < 0.2:
            request.pop(field)
        elif field == "oldObject" and operation == "CREATE":
            request[field] = value  # only its type is wrong: the field itself is optional on a CREATE
        else:
            request[field] = value
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def test_fuzzed_malformed_envelopes_are_denied_by_every_fail_webhook(faulty: Operator) -> None:
    fail_paths = [w.path for w in REGISTRY if w.fail_closed]
    rng = random.Random(24)
    ctx = ssl.create_default_context(cafile=str(faulty.ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", faulty.port, context=ctx, timeout=15)
    allowed: list[str] = []
    for i in range(2000):
        body = _malformed_envelope(rng, f"bad-{i}")
        conn.request("POST", rng.choice(fail_paths), body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = json.loads(response.read())
        assert response.status == 200 and data["kind"] == "AdmissionReview", data
        answer = data["response"]
        if answer["allowed"] is not False or "malformed AdmissionReview" not in answer["status"]["message"]:
            allowed.append(f"{body[:300]!r} -> {answer}")
    assert not allowed, allowed[:3]


def test_ten_thousand_fuzzed_reviews_get_well_formed_answers_with_their_uid(faulty: Operator) -> None:
    paths = [w.path for w in REGISTRY]
    failures: list[str] = []
    counts = [0]
    lock = threading.Lock()

    def worker(seed: int, n: int) -> None:
        rng = random.Random(seed)
        ctx = ssl.create_default_context(cafile=str(faulty.ca_file))
        conn = http.client.HTTPSConnection("127.0.0.1", faulty.port, context=ctx, timeout=15)
        for i in range(n):
            uid = f"fuzz-{seed}-{i}"
            body = _fuzz_body(rng, uid)
            try:
                conn.request("POST", rng.choice(paths), body=body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                data = json.loads(response.read())
            except (OSError, ValueError, http.client.HTTPException) as exc:
                failures.append(f"{uid}: {exc}")
                conn = http.client.HTTPSConnection("127.0.0.1", faulty.port, context=ctx, timeout=15)
                continue
            answer = data.get("response") or {}
            if (
                response.status != 200
                or data.get("kind") != "AdmissionReview"
                or answer.get("uid") != uid
                or not isinstance(answer.get("allowed"), bool)
            ):
                failures.append(f"{uid}: {data}")
            with lock:
                counts[0] += 1

    threads = [threading.Thread(target=worker, args=(seed, 2500)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert counts[0] == 10_000 and not failures, failures[:5]
    assert faulty.get("/healthz")[0] == 200

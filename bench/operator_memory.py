"""The operator's memory under the worst concurrent mix of maximal reviews, with its cache holding the 5,000-node
synthetic cluster (``testbed.synthetic.simulation_snapshot``): its peak resident memory as a share of its memory limit.

The operator runs as its own process, with ``--memory-limit``, against an API server of the test's own that serves
the synthetic cluster's lists (streamed as a watch's initial events, as the real one streams them, or paged) and
watches (a bookmark, then silence until the window ends) and accepts the controllers' writes. Loading 20,000 objects into a real API server takes minutes on a
shared machine; what is measured here is the operator's memory, which the API server's implementation does not enter.

Then ``concurrency`` clients each send maximal reviews (6.9 MiB, under the 7 MiB body limit) at once, round after
round, in the shapes that cost the most to decode (lists in lists, empty objects, one-key objects, short strings,
non-ASCII text) and in the shape of real objects, to the mutating and validating webhooks of Pods, Instances,
InstanceTypes and Workloads; the peak resident memory is the kernel's high-water mark (``VmHWM``), reset once the
cache is loaded.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.kinds import Kind
from testbed.operator_process import stop

ROOT = Path(__file__).resolve().parent.parent
MAXIMAL = int(6.9 * 1024 * 1024)
"""A maximal review: just under the operator's 7 MiB body limit."""
LIMIT = 768 * 1024 * 1024
"""The Deployment's memory limit."""

SERVED: tuple[Kind, ...] = (
    kinds.NODE,
    kinds.POD,
    kinds.DEVICES,
    kinds.INSTANCETYPE,
    kinds.INSTANCE,
    kinds.RESOURCEFLAVOR,
    kinds.CLUSTERQUEUE,
    kinds.LOCALQUEUE,
    kinds.WORKLOAD,
    kinds.ADMISSIONCHECK,
    kinds.TOPOLOGY,
)


def _collection(kind: Kind) -> str:
    base = f"/api/{kind.version}" if not kind.group else f"/apis/{kind.group}/{kind.version}"
    return f"{base}/{kind.plural}"


class ClusterAPI:
    """Lists and watches of a fixed set of objects over plain HTTP, with the paging, the field selector on a Pod's
    node and the answers to writes the operator relies on; anything else is 404, as for an API not served."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.collections: dict[str, list[tuple[dict[str, Any], bytes]]] = {_collection(k): [] for k in SERVED}
        self.by_name: dict[tuple[str, str], dict[str, Any]] = {}
        for obj in objects:
            kind = next((k for k in SERVED if k.matches(obj["apiVersion"], obj["kind"])), None)
            if kind is None:
                continue
            path = _collection(kind)
            self.collections[path].append((obj, json.dumps(obj).encode()))
            self.by_name[(path, obj["metadata"]["name"])] = obj
        self.requests = 0
        self._closing = threading.Event()
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                api.requests += 1
                api.get(self)

            def do_PATCH(self) -> None:
                api.requests += 1
                api.write(self)

            def do_POST(self) -> None:
                api.requests += 1
                api.write(self)

            do_PUT = do_POST

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def _send(handler: Any, status: int, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _route(self, path: str) -> tuple[str, str | None]:
        """(collection, name or None), namespaces dropped: every list here is cluster-wide."""
        parts = path.split("/")
        if "namespaces" in parts:
            i = parts.index("namespaces")
            parts = parts[:i] + parts[i + 2 :]
        joined = "/".join(parts)
        if joined in self.collections:
            return joined, None
        head, _, name = joined.rpartition("/")
        return head, name

    def get(self, handler: Any) -> None:
        url = urllib.parse.urlsplit(handler.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        collection, name = self._route(url.path)
        if collection not in self.collections:
            self._send(handler, 404, b'{"kind":"Status","code":404,"message":"the server could not find it"}')
            return
        if name is not None:
            obj = self.by_name.get((collection, name))
            if obj is None:
                message = json.dumps({"kind": "Status", "code": 404, "message": f'"{name}" not found'})
                self._send(handler, 404, message.encode())
            else:
                self._send(handler, 200, json.dumps(obj).encode())
            return
        if query.get("watch") in ("1", "true"):
            initial = self.collections[collection] if query.get("sendInitialEvents") == "true" else None
            self._watch(handler, float(query.get("timeoutSeconds", "60")), initial)
            return
        items = self.collections[collection]
        node = query.get("fieldSelector", "").removeprefix("spec.nodeName=")
        if node and "fieldSelector" in query:
            items = [(o, raw) for o, raw in items if (o.get("spec") or {}).get("nodeName") == node]
        start = int(query.get("continue") or 0)
        size = int(query.get("limit") or len(items) or 1)
        page = items[start : start + size]
        more = start + size < len(items)
        meta = {"resourceVersion": "100", **({"continue": str(start + size)} if more else {})}
        body = b'{"kind":"List","apiVersion":"v1","metadata":%s,"items":[%s]}' % (
            json.dumps(meta).encode(),
            b",".join(raw for _, raw in page),
        )
        self._send(handler, 200, body)

    def _watch(self, handler: Any, seconds: float, initial: list[tuple[dict[str, Any], bytes]] | None) -> None:
        """A bookmark, then silence until the window ends; a streamed list (``initial``) first sends every object
        as an ADDED event and ends them with the bookmark. Chunked, as the API server streams a watch (a client
        reads each chunk as it comes)."""
        handler.protocol_version = "HTTP/1.1"
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Connection", "close")
        handler.end_headers()

        def chunk(data: bytes) -> None:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        bookmark: dict[str, Any] = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "100"}}}
        try:
            if initial is not None:
                for _, raw in initial:
                    chunk(b'{"type":"ADDED","object":%s}\n' % raw)
                bookmark["object"]["metadata"]["annotations"] = {"k8s.io/initial-events-end": "true"}
            chunk(json.dumps(bookmark).encode() + b"\n")
            handler.wfile.flush()
            self._closing.wait(seconds)
            handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            return

    def write(self, handler: Any) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b"{}"
        collection, name = self._route(urllib.parse.urlsplit(handler.path).path.removesuffix("/status"))
        obj = self.by_name.get((collection, name or ""))
        self._send(handler, 200 if obj is not None else 201, json.dumps(obj).encode() if obj is not None else body)


# ----------------------------------------------------------------------------------------------- the reviews


def _filler(unit: str, size: int) -> str:
    return "[" + ",".join([unit] * max(1, size // (len(unit) + 1))) + "]"


SHAPES: dict[str, str] = {
    "lists in lists": "[[[[[[]]]]]]",
    "empty objects": "{}",
    "one-key objects": '{"a":0}',
    "short strings": '"ab"',
    "non-ASCII strings": '"中文字"',
}
"""The shapes that cost the most to decode (docs: about 40x, 25x, 25x, 13x and 12x their bytes)."""
WEBHOOKS = ("/mutate-pod-accelerators", "/mutate-instances", "/validate-instancetypes", "/mutate-workloads")
MIX: tuple[tuple[str, str], ...] = tuple((path, shape) for shape in (*SHAPES, "objects") for path in WEBHOOKS)
"""Every costly shape on every webhook: the worst mix, sent all at once."""


def maximal_review(webhook_path: str, shape: str, uid: str, size: int = MAXIMAL) -> bytes:
    """A review of ``size`` bytes (6.9 MiB) for one webhook, its object filled with ``shape`` (or real objects:
    ``"objects"``) where its rule reads or copies it."""
    from testbed.factories import instancetype
    from testbed.request_examples import EXAMPLES

    pod = json.loads(json.dumps(next(e for e in EXAMPLES if e.id == "rule2-accept").pod))
    marker = "@FILL@"
    operation = "CREATE"
    if "instancetype" in webhook_path:
        obj: dict[str, Any] = instancetype()
        obj.pop("status", None)
        obj["metadata"]["annotations"] = {"filler": marker}
    elif "instance" in webhook_path:
        obj = {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "Instance",
            "metadata": {"name": "big", "namespace": "team-a"},
            "spec": {"type": "gpustack--nvidia-a10g-linux-amd64", "image": "x", "additionalVolumes": marker},
        }
    elif "workload" in webhook_path:
        obj = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "big", "namespace": "team-a"},
            "spec": {
                "queueName": "gpustack-fnv64-c4680bb149644f1c",
                "podSets": [{"name": "main", "count": 1, "template": {"spec": pod["spec"]}, "x": marker}],
            },
        }
    else:
        pod["spec"]["containers"][0]["x"] = marker
        obj = pod
    request = {"uid": uid, "operation": operation, "namespace": "team-a", "object": obj}
    text = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    room = size - len(text.encode())
    if shape == "objects":
        real = json.dumps(pod)
        filler = "[" + ",".join([real] * (room // (len(real) + 1))) + "]"
    else:
        unit = SHAPES[shape]
        filler = _filler(unit, room // len(unit.encode()) * len(unit))
    return text.replace(json.dumps(marker), filler).encode()


@dataclass
class Result:
    limit: int
    baseline: int
    """Resident memory with the cache loaded, before the reviews."""
    peak: int
    """The kernel's high-water mark of resident memory over the reviews."""
    outcomes: dict[str, int] = field(default_factory=dict)
    """Answers by kind: ``judged`` (by the webhook's rule), and the refusals by reason."""
    failures: list[str] = field(default_factory=list)
    """Reviews that got no well-formed answer."""
    exit_code: int | None = None
    """The operator's exit code when it died during the reviews (None: it kept running)."""

    @property
    def fraction(self) -> float:
        return self.peak / self.limit


def _status(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _wait(what: str, probe: Any, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the operator exited waiting for {what}: {log.read_text()[-2000:]}")
        try:
            if probe():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}")


def _get(port: int, ca: Path, path: str) -> tuple[int, str]:
    conn = http.client.HTTPSConnection(
        "127.0.0.1", port, context=ssl.create_default_context(cafile=str(ca)), timeout=10
    )
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(
    work: Path,
    *,
    nodes: int = 5000,
    concurrency: int = len(MIX),
    rounds: int = 2,
    limit: int = LIMIT,
    operator_args: tuple[str, ...] = (),
) -> Result:
    """Start the operator on the synthetic cluster, send the mix, and say what memory it took."""
    from testbed.pki import loopback_tls_files
    from testbed.synthetic import simulation_snapshot

    objects = simulation_snapshot(nodes)
    api = ClusterAPI(objects)
    cert, key, ca = loopback_tls_files(work)
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": api.url}}],
                "users": [{"name": "u", "user": {"token": "bench"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    port = _free_port()
    log = work / "operator.log"
    argv = [
        sys.executable,
        "-m",
        "gpuctl.operator",
        "--mode=standalone",
        "--kubeconfig",
        str(kubeconfig),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        "--namespace",
        "default",
        "--memory-limit",
        str(limit),
        *operator_args,
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        _wait("the webhooks", lambda: _get(port, ca, "/readyz")[0] == 200, 60, proc, log)

        def cache_loaded() -> bool:
            text = _get(port, ca, "/metrics")[1]
            return all(f'gpuctl_cache_synced{{kind="{k.plural}"}} 1.0' in text for k in (kinds.NODE, kinds.DEVICES))

        _wait("the cache", cache_loaded, 180, proc, log)
        # Settled: the controllers' first pass over every key is done when the resident size stops growing.
        settled, last = 0, 0
        while settled < 4:
            time.sleep(0.5)
            now = _status(proc.pid, "VmRSS")
            settled = settled + 1 if abs(now - last) < 2 * 1024 * 1024 else 0
            last = now
        baseline = _status(proc.pid, "VmRSS")
        Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # the high-water mark starts again from here
        result = Result(limit, baseline, 0)
        _send_mix(port, ca, concurrency, rounds, result)
        result.exit_code = proc.poll()
        result.peak = _status(proc.pid, "VmHWM") if result.exit_code is None else limit
        return result
    finally:
        stop(proc)
        api.close()


def mix(concurrency: int, rounds: int) -> Iterator[tuple[str, str]]:
    """(webhook path, shape) of each review: :data:`MIX` over and over."""
    for i in range(concurrency * rounds):
        yield MIX[i % len(MIX)]


def _send_mix(port: int, ca: Path, concurrency: int, rounds: int, result: Result) -> None:
    bodies = {(path, shape): maximal_review(path, shape, "mix") for path, shape in set(mix(concurrency, rounds))}
    lock = threading.Lock()
    plan = list(mix(concurrency, rounds))
    barrier = threading.Barrier(concurrency)

    def client(index: int) -> None:
        ctx = ssl.create_default_context(cafile=str(ca))
        for r in range(rounds):
            path, shape = plan[r * concurrency + index]
            barrier.wait(120)  # every client of a round sends at once
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=60)
            try:
                conn.request("POST", path, body=bodies[(path, shape)], headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                data = json.loads(response.read())
                answer = data["response"]
                assert response.status == 200 and answer["uid"] == "mix" and isinstance(answer["allowed"], bool)
                message = (answer.get("status") or {}).get("message") or " ".join(answer.get("warnings") or [])
                outcome = (
                    "busy"
                    if "busy" in message
                    else "too costly"
                    if "more memory" in message
                    else "too large"
                    if "larger than" in message
                    else "judged"
                )
            except (OSError, ValueError, KeyError, AssertionError, http.client.HTTPException) as exc:
                with lock:
                    result.failures.append(f"{path} {shape}: {exc!r}")
                continue
            finally:
                conn.close()
            with lock:
                result.outcomes[outcome] = result.outcomes.get(outcome, 0) + 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        r = measure(
            Path(tmp),
            concurrency=int(os.environ.get("CONCURRENCY", str(len(MIX)))),
            rounds=int(os.environ.get("ROUNDS", "2")),
            operator_args=tuple(sys.argv[1:]),
        )
        print(r, f"peak {r.peak >> 20} MiB = {100 * r.fraction:.0f} % of {r.limit >> 20} MiB")

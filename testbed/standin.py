"""A stand-in for GPUStack's worker: the objects it owns, in the shapes its code writes them — its Deployment and
Lease, its webhook configurations (every entry gpuctl's gates read, as its generator writes them), its two
AdmissionChecks, an InstanceType's status (views as quantities, detail as strings, profiles by name, its phase
words), and Kueue's Configuration as its chart renders it.

What it writes is computed with gpuctl's core (the figures) and shaped as GPUStack's Go types serialize (the
shapes): the example snapshot of a GPUStack cluster is made from it, and the integration tests install it on the
real control plane to run the companion beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.core import gpustack, naming
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import NodeDevices
from gpuctl.core.lifecycle import queue_summary
from gpuctl.core.units import M
from gpuctl.core.views import instancetype_views, pool_devices, runtime_versions, views_to_status
from gpuctl.core.workloads import ClusterQueue, parse_cluster_queue

JSON = dict[str, Any]
WORKER_NAME = "gpustack-operator-worker"
WORKER_LABELS = {
    "app.kubernetes.io/part-of": "gpustack-operator",
    "app.kubernetes.io/component": "operator",
    "app.kubernetes.io/name": WORKER_NAME,
}


def worker_deployment(env: Mapping[str, str], namespace: str = gpustack.WORKER_NAMESPACE) -> JSON:
    """The worker's Deployment as the chart renders it, with the manufacturer settings of ``global.manufacturers``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": WORKER_NAME, "namespace": namespace, "labels": dict(WORKER_LABELS)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(WORKER_LABELS)},
            "template": {
                "metadata": {"labels": dict(WORKER_LABELS)},
                "spec": {
                    "serviceAccountName": WORKER_NAME,
                    "containers": [
                        {
                            "name": gpustack.WORKER_CONTAINER,
                            "image": "gpustack/gpustack-operator:v0.9.0",
                            "args": [
                                "gpustack-operator",
                                "worker",
                                "-v=2",
                                "--secure-port=31443",
                                "--manufacturer=hygon,nvidia,thead",
                                "--disable-applications=*",
                            ],
                            "env": [
                                {
                                    "name": "KUBERNETES_POD_NAMESPACE",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                },
                                {"name": "KUBERNETES_SERVICE_NAME", "value": WORKER_NAME},
                                *({"name": k, "value": v} for k, v in sorted(env.items())),
                            ],
                            "ports": [{"name": "https", "containerPort": 31443}],
                        }
                    ],
                },
            },
        },
        "status": {"replicas": 1, "readyReplicas": 1},
    }


def worker_lease(renewed: str, namespace: str = gpustack.WORKER_NAMESPACE) -> JSON:
    """The worker's leader Lease (``renewed``: RFC 3339 with microseconds, as client-go writes it)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": gpustack.WORKER_LEASE, "namespace": namespace},
        "spec": {
            "holderIdentity": f"{WORKER_NAME}-7d9f8c6b5-x2k4q_5b1c",
            "leaseDurationSeconds": 15,
            "acquireTime": renewed,
            "renewTime": renewed,
            "leaseTransitions": 0,
        },
    }


# ----------------------------------------------------------------------------------------------- webhooks


def _entry(
    name: str,
    group: str,
    version: str,
    resource: str,
    scope: str,
    operations: Sequence[str],
    policy: str,
    client: JSON,
    *,
    selector: JSON | None = None,
    conditions: Sequence[JSON] = (),
    mutating: bool = False,
    reinvocation: str = "",
) -> JSON:
    path = "/" + name.replace(".", "-")
    config = (
        {**client, "service": {**client["service"], "path": path}}
        if "service" in client
        else {
            **client,
            "url": client["url"] + path,
        }
    )
    out: JSON = {
        "name": name,
        "clientConfig": config,
        "rules": [
            {
                "operations": list(operations),
                "apiGroups": [group],
                "apiVersions": [version],
                "resources": [resource],
                "scope": scope,
            }
        ],
        "failurePolicy": policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": 10,
        "admissionReviewVersions": ["v1"],
    }
    if selector is not None:
        out["objectSelector"] = selector
    if conditions:
        out["matchConditions"] = list(conditions)
    if mutating and reinvocation:
        out["reinvocationPolicy"] = reinvocation
    return out


def webhook_configurations(ca_bundle: str, *, url: str = "", namespace: str = gpustack.WORKER_NAMESPACE) -> list[JSON]:
    """GPUStack's two configurations, whole (by ``url`` for a stand-in server, else by the worker's Service): the
    entries its generator writes for the kinds gpuctl reads, sorted as it sorts them."""
    client: JSON = (
        {"url": url, "caBundle": ca_bundle}
        if url
        else {"service": {"namespace": namespace, "name": WORKER_NAME, "port": 443}, "caBundle": ca_bundle}
    )
    queue = {"matchExpressions": [{"key": naming.LABEL_QUEUE_NAME, "operator": "Exists"}]}
    kvcache = {"matchExpressions": [{"key": "kvcache.gpustack.ai/inject", "operator": "In", "values": ["true"]}]}
    w = ("worker.gpustack.ai", "v1alpha1")
    validating = [
        _entry(
            "validate.worker.gpustack.ai.v1alpha1.instancetype",
            *w,
            "instancetypes",
            "Cluster",
            ["CREATE", "UPDATE"],
            "Fail",
            client,
        ),
        _entry(
            "validate.worker.gpustack.ai.v1alpha1.instance",
            *w,
            "instances",
            "Namespaced",
            ["CREATE", "UPDATE"],
            "Fail",
            client,
        ),
        _entry(
            "validate.worker.gpustack.ai.v1alpha1.modeldeployment",
            *w,
            "modeldeployments",
            "Namespaced",
            ["CREATE", "UPDATE"],
            "Fail",
            client,
        ),
        _entry(
            "validate.gpustack-worker-kvcache.core.v1.pod",
            "",
            "v1",
            "pods",
            "Namespaced",
            ["UPDATE"],
            "Ignore",
            client,
            selector=kvcache,
        ),
        _entry(
            "validate.gpustack-worker.core.v1.pod",
            "",
            "v1",
            "pods",
            "Namespaced",
            ["CREATE"],
            "Fail",
            client,
            selector=queue,
        ),
    ]
    mutating = [
        _entry(
            "mutate.worker.gpustack.ai.v1alpha1.instancetype",
            *w,
            "instancetypes",
            "Cluster",
            ["CREATE", "UPDATE"],
            "Fail",
            client,
            mutating=True,
        ),
        _entry(
            "mutate.worker.gpustack.ai.v1alpha1.instance",
            *w,
            "instances",
            "Namespaced",
            ["CREATE", "UPDATE"],
            "Fail",
            client,
            mutating=True,
        ),
        _entry(
            "mutate.gpustack-worker-kvcache.core.v1.pod",
            "",
            "v1",
            "pods",
            "Namespaced",
            ["CREATE"],
            "Fail",
            client,
            selector=kvcache,
            mutating=True,
            reinvocation="Never",
        ),
        _entry(
            "mutate.gpustack-worker.core.v1.pod",
            "",
            "v1",
            "pods",
            "Namespaced",
            ["CREATE"],
            "Fail",
            client,
            selector=queue,
            mutating=True,
        ),
        _entry(
            "mutate.gpustack-worker.kueue.x-k8s.io.v1beta2.workload",
            "kueue.x-k8s.io",
            "v1beta2",
            "workloads",
            "Namespaced",
            ["CREATE", "UPDATE"],
            "Ignore",
            client,
            conditions=[
                {
                    "name": "gpustack-local-queue",
                    "expression": "has(object.spec.queueName) && object.spec.queueName.startsWith('gpustack-fnv64-')",
                }
            ],
            mutating=True,
        ),
    ]
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": gpustack.MUTATING_CONFIGURATION},
            "webhooks": mutating,
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": gpustack.VALIDATING_CONFIGURATION},
            "webhooks": validating,
        },
    ]


def admission_checks() -> list[JSON]:
    """The two AdmissionChecks the worker applies at start, each marked Active by its controller."""
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "gpustack-operator"}},
            "spec": {"controllerName": controller},
            "status": {
                "conditions": [
                    {
                        "type": "Active",
                        "status": "True",
                        "reason": "Ready",
                        "message": gpustack.ACTIVE_MESSAGES[name],
                        "lastTransitionTime": "2026-11-30T00:00:00Z",
                    }
                ]
            },
        }
        for name, controller in gpustack.CHECKS.items()
    ]


# ----------------------------------------------------------------------------------------------- status


def _quantity(value: int) -> str:
    """A quantity as Go's resource.Quantity serializes a whole number (DecimalSI): its digits."""
    return str(value)


def instancetype_status(
    it: InstanceType,
    devices: Sequence[NodeDevices],
    queue: ClusterQueue | None,
    notes: Mapping[str, str] | None = None,
) -> JSON:
    """An InstanceType's status as GPUStack's status writer writes it: every view (zero where it counts nothing, all
    zero while its queue drains) as quantities; ``acceleratorPartitioned``'s profiles by name (allocated ones
    absent at zero); ``detail`` from its flavor's notes and its pool's cards, every descriptor a string; the entrance;
    the phase and message of its queue's summary."""
    views = views_to_status(instancetype_views(it, devices, queue))
    status: JSON = {}
    for key in ("accelerator", "acceleratorShared", "acceleratorSliced", "acceleratorPartitioned", "cpu"):
        view = views[key]
        assert isinstance(view, dict)
        status[key] = {n: _quantity(view[n]) for n in ("onceMaxRequest", "remaining", "capacity")}
    pt = views["acceleratorPartitioned"]
    assert isinstance(pt, dict)
    if pt["remainingProfiles"]:
        status["acceleratorPartitioned"]["remainingProfiles"] = pt["remainingProfiles"]
    if pt["allocatedProfiles"]:
        status["acceleratorPartitioned"]["allocatedProfiles"] = pt["allocatedProfiles"]
    detail: JSON = {}
    pool = pool_devices(devices, it) if it.acceleratable else []
    groups = [g for d in pool for g in d.groups if g.accelerator_key == it.accelerator_group]
    if groups:
        first = groups[0]
        detail = {"manufacturer": first.manufacturer, "product": first.product}
        if first.family:
            detail["family"] = first.family
        for key in ("memory", "cores"):
            if notes and notes.get(key):
                detail[key] = notes[key]
        versions = runtime_versions(g.runtime_version for g in groups)
        if versions:
            detail["runtimeVersion"] = versions[0]
            detail["runtimeVersions"] = list(versions)
        cards = [c for g in groups for c in g.cards]
        profiles: dict[str, list[int]] = {}
        for c in cards:
            for p in c.profiles:
                entry = profiles.setdefault(p.published, [0, p.memory_mib])
                entry[0] += p.count
        detail["slicedDetail"] = {
            "logical": {
                "coresPercentageOvercommit": any(c.cores_overcommit for c in cards if c.sliceable),
                "count": sum(c.logical_slots for c in cards if not c.partitioned),
            },
            "physical": {
                "count": sum(c.partition_ceiling for c in cards),
                **(
                    {"profiles": [{"name": n, "count": cnt, "memoryMib": mib} for n, (cnt, mib) in profiles.items()]}
                    if profiles
                    else {}
                ),
            },
        }
    if detail:
        status["detail"] = detail
    status["entrance"] = naming.queue_entrance(it.name)
    outstanding = bool(queue and (queue.reserving or queue.admitted or any(t for _, _, t in queue.reported)))
    phase, message = queue_summary(queue.stop_policy if queue else "None", outstanding, queue.active if queue else None)
    status["phase"] = phase
    if message:
        status["phaseMessage"] = message
    return status


# ----------------------------------------------------------------------------------------------- Kueue


def credits_transformations(manufacturers: Mapping[str, str], partitioning: Sequence[str]) -> list[JSON]:
    """What the chart's helper renders for each manufacturer (name → base resource), keys sorted."""
    out: list[JSON] = []
    for mfr in sorted(manufacturers):
        base, credits = manufacturers[mfr], naming.CREDITS_PREFIX + mfr
        out += [
            {"input": base, "strategy": "Replace", "outputs": {credits: str(M)}},
            {"input": f"{base}.shared", "strategy": "Replace", "outputs": {credits: str(M // 10)}},
            {
                "input": f"{base}.sliced.units",
                "strategy": "Replace",
                "multiplyBy": f"{base}.sliced",
                "outputs": {credits: "1"},
            },
        ]
        if mfr in partitioning:
            out.append({"input": f"{base}.partitioned.units", "strategy": "Replace", "outputs": {credits: "1"}})
    return out


def kueue_configuration(manufacturers: Mapping[str, str], partitioning: Sequence[str]) -> JSON:
    """Kueue's Configuration as GPUStack's chart writes it (its newer variant): the queue-label gate off, balanced
    TAS placement and the quota check strategy on, undeclared resources ignored, the credits transformations."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1",
        "kind": "Configuration",
        "featureGates": {"AssignQueueLabelsForPods": False, "TASBalancedPlacement": True, "QuotaCheckStrategy": True},
        "integrations": {"frameworks": ["batch/job", "pod", "deployment", "statefulset"]},
        "resources": {
            "quotaCheckStrategy": "IgnoreUndeclared",
            "transformations": credits_transformations(manufacturers, partitioning),
        },
    }


# ----------------------------------------------------------------------------------------------- on a live cluster


class AllowEveryReview:
    """The stand-in's webhook server: a TLS endpoint that allows every AdmissionReview unchanged (GPUStack's rules
    are not this stand-in's to play; its configurations only need an endpoint that answers)."""

    def __init__(self, cert_pem: bytes, key_pem: bytes, work: Any) -> None:
        import http.server
        import ssl
        import threading

        cert, key = work / "standin.crt", work / "standin.key"
        cert.write_bytes(cert_pem)
        key.write_bytes(key_pem)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                import json

                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                uid = (json.loads(body or b"{}").get("request") or {}).get("uid", "")
                answer = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {"uid": uid, "allowed": True},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="standin-webhooks", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Worker:
    """GPUStack's worker stood in on a live API server: its namespace, Deployment and Lease (renewed while it runs),
    its webhook configurations (answered by :class:`AllowEveryReview`), its two AdmissionChecks, Active; and what its
    controllers write — InstanceType statuses, fit labels, check verdicts — in their shapes, when asked."""

    def __init__(self, api: Any, control_plane: Any, work: Any, env: Mapping[str, str] | None = None) -> None:
        self.api = api
        self.control_plane = control_plane
        self.work = work
        self.env = dict(env or {})
        self.reviews: AllowEveryReview | None = None
        self._stop: Any = None

    # -- install and remove

    def install(self) -> None:
        import datetime
        import threading

        from kubernetes import client
        from kubernetes.client.rest import ApiException

        core, apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)
        ns = gpustack.WORKER_NAMESPACE
        try:
            core.create_namespace({"metadata": {"name": ns}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        apps.create_namespaced_deployment(ns, worker_deployment(self.env))
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        client.CoordinationV1Api(self.api).create_namespaced_lease(ns, worker_lease(stamp))
        self._stop = threading.Event()
        threading.Thread(target=self._renew, name="standin-lease", daemon=True).start()
        pair = self.control_plane.serving_cert(["127.0.0.1"])
        self.reviews = AllowEveryReview(pair.cert_pem, pair.key_pem, self.work)
        bundle = self.control_plane.ca_bundle
        adm = client.AdmissionregistrationV1Api(self.api)
        mutating, validating = webhook_configurations(bundle, url=self.reviews.url)
        adm.create_mutating_webhook_configuration(mutating)
        adm.create_validating_webhook_configuration(validating)
        objs = client.CustomObjectsApi(self.api)
        for check in admission_checks():
            status = check.pop("status")
            try:
                objs.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "admissionchecks", check)
            except ApiException as exc:
                if exc.status != 409:
                    raise
            objs.patch_cluster_custom_object_status(
                "kueue.x-k8s.io", "v1beta2", "admissionchecks", check["metadata"]["name"], {"status": status}
            )

    def _renew(self) -> None:
        import contextlib
        import datetime

        from kubernetes import client

        leases = client.CoordinationV1Api(self.api)
        while not self._stop.wait(5.0):
            stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            with contextlib.suppress(Exception):  # a missed renewal is the next one's to make
                leases.patch_namespaced_lease(
                    gpustack.WORKER_LEASE, gpustack.WORKER_NAMESPACE, {"spec": {"renewTime": stamp}}
                )

    def remove(self) -> None:
        """Take every object it made away (the suite's other tests run the standalone operator, which refuses to
        start where these are)."""
        import contextlib

        from kubernetes import client
        from kubernetes.client.rest import ApiException

        if self._stop is not None:
            self._stop.set()
        adm = client.AdmissionregistrationV1Api(self.api)
        with contextlib.suppress(ApiException):
            adm.delete_mutating_webhook_configuration(gpustack.MUTATING_CONFIGURATION)
        with contextlib.suppress(ApiException):
            adm.delete_validating_webhook_configuration(gpustack.VALIDATING_CONFIGURATION)
        with contextlib.suppress(ApiException):
            client.CoordinationV1Api(self.api).delete_namespaced_lease(gpustack.WORKER_LEASE, gpustack.WORKER_NAMESPACE)
        with contextlib.suppress(ApiException):
            client.AppsV1Api(self.api).delete_namespaced_deployment(WORKER_NAME, gpustack.WORKER_NAMESPACE)
        if self.reviews is not None:
            self.reviews.stop()

    # -- what its controllers write

    def source(self) -> Any:
        from gpuctl.cluster.live import Connection, LiveSource

        return LiveSource(Connection(str(self.control_plane.kubeconfig)))

    def publish_status(self, instancetype: str) -> JSON:
        """Write an InstanceType's status as GPUStack's status writer does (a whole status, from the cluster's
        Devices and the pool's ClusterQueue)."""
        from kubernetes import client

        from gpuctl.core.instancetypes import parse_instancetype
        from gpuctl.core.ledger import parse_devices

        objs = client.CustomObjectsApi(self.api)
        it = parse_instancetype(
            objs.get_cluster_custom_object("worker.gpustack.ai", "v1alpha1", "instancetypes", instancetype)
        )
        devices = [
            parse_devices(d)
            for d in objs.list_cluster_custom_object("worker.gpustack.ai", "v1alpha1", "devices")["items"]
        ]
        queue = parse_cluster_queue(
            objs.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", instancetype)
        )
        status = instancetype_status(it, devices, queue)
        objs.patch_cluster_custom_object_status(
            "worker.gpustack.ai", "v1alpha1", "instancetypes", instancetype, {"status": status}
        )
        return status

    def publish_fit_labels(self, node: str) -> dict[str, str]:
        """Write a Node's fit labels as GPUStack's fit-label writer does (a merge patch of those labels alone)."""
        from kubernetes import client

        from gpuctl.core.ledger import parse_devices
        from gpuctl.core.pins import fit_label_changes, node_fit_labels

        objs = client.CustomObjectsApi(self.api)
        core = client.CoreV1Api(self.api)
        led = parse_devices(objs.get_cluster_custom_object("worker.gpustack.ai", "v1alpha1", "devices", node))
        labels = core.read_node(node).metadata.labels or {}
        desired = node_fit_labels(led)
        changes = fit_label_changes(labels, desired)
        if changes:
            core.patch_node(node, {"metadata": {"labels": changes}})
        return desired

    def judge(self, namespace: str, name: str, state: str, message: str, *, joint: str = "Ready") -> None:
        """Write a verdict of its node-devices check (server-side apply, its field owner), and its joint check's
        (Ready: a Workload that is no ModelDeployment replica)."""
        joint_message = gpustack.JOINT_NOTHING_TO_WAIT_FOR if joint == "Ready" else "holding this replica"
        for check, state_, message_, owner in (
            (naming.NODE_DEVICES_CHECK, state, message, "gpustack-node-devices"),
            (gpustack.JOINT_CHECK, joint, joint_message, gpustack.JOINT_CONTROLLER),
        ):
            entry: JSON = {"name": check, "state": state_, "message": message_}
            if state_ == "Retry":
                entry["requeueAfterSeconds"] = 30
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": name, "namespace": namespace},
                "status": {"admissionChecks": [entry]},
            }
            self.source().patch(
                kinds.WORKLOAD,
                name,
                body,
                namespace=namespace,
                subresource="status",
                patch_type="application/apply-patch+yaml",
                field_manager=owner,
                force=True,
            )

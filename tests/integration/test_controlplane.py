"""The integration control plane is real: schema validation, dry-run, RBAC and Kueue TAS admission."""

from __future__ import annotations

import contextlib
import datetime
import json
import time
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from testbed.gpucluster import create_ready_node

GROUP, VERSION = "worker.gpustack.ai", "v1alpha1"
KUEUE, KV = "kueue.x-k8s.io", "v1beta2"
CREDITS = "credits.gpustack.ai/nvidia"
M = 1_600_000  # credits per card
HOSTNAME = "kubernetes.io/hostname"
POOL_LABEL = "gpuctl.test/pool"
CHECK_NAME = "gpustack-node-devices"
CHECK_CONTROLLER = "worker.gpustack.ai/node-devices"


def _uid() -> str:
    return uuid.uuid4().hex[:6]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def instance_type(name: str, **spec) -> dict:
    base = {
        "acceleratable": True,
        "acceleratorGroup": "nvidia-a10g",
        "generalGroup": "generic",
        "os": "linux",
        "arch": "amd64",
        "unitResources": {"cpu": "8", "ram": "64Gi"},
        "localStorage": "100Gi",
    }
    base.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InstanceType", "metadata": {"name": name}, "spec": base}


def wait_for(what: str, fn, timeout: float = 30.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}")


def condition(obj: dict, ctype: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def assigned_nodes(topology_assignment: dict) -> list[str]:
    """Decode a v1beta2 (compressed) topologyAssignment into hostname values."""
    idx = topology_assignment["levels"].index(HOSTNAME)
    nodes: list[str] = []
    for sl in topology_assignment.get("slices") or []:
        count = sl.get("domainCount", 1)
        values = sl["valuesPerLevel"][idx]
        if values.get("universal") is not None:
            nodes.extend([values["universal"]] * count)
        else:
            ind = values["individual"]
            nodes.extend(ind.get("prefix", "") + r + ind.get("suffix", "") for r in ind["roots"])
    return nodes


# --------------------------------------------------------------------------
# API server


def test_server_version_is_stamped(api, control_plane):
    info = client.VersionApi(api).get_code()
    expected = control_plane.versions.kubernetes
    assert info.git_version == expected, (info.git_version, control_plane.versions.describe())
    assert (info.major, info.minor) == tuple(expected.lstrip("v").split(".")[:2])


def test_instancetype_names_as_gpustacks_crd_has_them(api):
    """GPUStack's v1alpha1 CRD: short name and category, one served version with its status subresource, and no
    printer columns of its own (``kubectl get instancetypes`` on a GPUStack cluster reads its aggregated v1 API)."""
    ext = client.ApiextensionsV1Api(api)
    crd = ext.read_custom_resource_definition(f"instancetypes.{GROUP}")
    assert crd.spec.names.short_names == ["instype"]
    assert crd.spec.names.categories == ["gpustack"]
    assert crd.spec.scope == "Cluster"
    [version] = crd.spec.versions
    assert (version.name, version.served, version.storage) == ("v1alpha1", True, True)
    assert version.subresources.status is not None
    assert not version.additional_printer_columns


def test_valid_instancetype_is_accepted(api):
    objs = client.CustomObjectsApi(api)
    name = f"it-valid-{_uid()}"
    created = objs.create_cluster_custom_object(
        GROUP, VERSION, "instancetypes", instance_type(name), field_validation="Strict"
    )
    try:
        assert created["spec"]["os"] == "linux"
        status = {
            "status": {
                "entrance": "gpustack-fnv64-c4680bb149644f1c",
                "phase": "Active",
                "accelerator": {"onceMaxRequest": "1", "remaining": "1", "capacity": "1"},
                "acceleratorShared": {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"},
                "acceleratorSliced": {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"},
                "cpu": {"onceMaxRequest": "0", "remaining": "0", "capacity": "0"},
                "acceleratorPartitioned": {
                    "onceMaxRequest": "0",
                    "remaining": "0",
                    "capacity": "0",
                    "remainingProfiles": [{"name": "3g.40gb", "count": 0}],
                },
            }
        }
        updated = objs.patch_cluster_custom_object_status(GROUP, VERSION, "instancetypes", name, status)
        assert updated["status"]["phase"] == "Active"
    finally:
        objs.delete_cluster_custom_object(GROUP, VERSION, "instancetypes", name)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda o: o["spec"].__setitem__("os", 5), "spec.os"),
        (lambda o: o["spec"].pop("arch"), "spec.arch"),
        (lambda o: o["spec"].__setitem__("bogusField", "x"), "bogusField"),
    ],
    ids=["os-not-a-string", "arch-missing", "unknown-field"],
)
def test_malformed_instancetype_is_rejected(api, mutate, needle):
    objs = client.CustomObjectsApi(api)
    body = instance_type(f"it-bad-{_uid()}")
    mutate(body)
    with pytest.raises(ApiException) as err:
        objs.create_cluster_custom_object(GROUP, VERSION, "instancetypes", body, field_validation="Strict")
    assert err.value.status in (400, 422), err.value.body
    assert needle in err.value.body


def test_server_side_dry_run_leaves_nothing(api):
    objs = client.CustomObjectsApi(api)
    name = f"it-dry-{_uid()}"
    out = objs.create_cluster_custom_object(GROUP, VERSION, "instancetypes", instance_type(name), dry_run="All")
    assert out["metadata"]["name"] == name
    with pytest.raises(ApiException) as err:
        objs.get_cluster_custom_object(GROUP, VERSION, "instancetypes", name)
    assert err.value.status == 404


def test_view_only_user_is_forbidden_to_write(control_plane, api):
    from kubernetes import config

    user = f"viewer-{_uid()}"
    rbac = client.RbacAuthorizationV1Api(api)
    binding = f"gpuctl-it-{user}"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
    )
    viewer = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    viewer.set_default_header("Impersonate-User", user)
    try:
        core = client.CoreV1Api(viewer)

        # view grants reads (once the RBAC informer has seen the binding) ...
        def can_read() -> bool:
            try:
                core.list_namespaced_config_map("default")
            except ApiException as exc:
                if exc.status == 403:
                    return False
                raise
            return True

        wait_for("the view binding to take effect", can_read)
        # ... and nothing else.
        with pytest.raises(ApiException) as err:
            core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{_uid()}"}})
        assert err.value.status == 403
        assert user in err.value.body
        with pytest.raises(ApiException) as err:
            client.CustomObjectsApi(viewer).create_cluster_custom_object(
                GROUP, VERSION, "instancetypes", instance_type(f"it-rbac-{_uid()}")
            )
        assert err.value.status == 403
    finally:
        viewer.close()
        rbac.delete_cluster_role_binding(binding)


# --------------------------------------------------------------------------
# Kueue: TAS admission and an external AdmissionCheck


@pytest.fixture(scope="module")
def tas_pool(api, test_namespace):
    """A Topology (hostname level), a TAS ResourceFlavor and two Ready Nodes with credits."""
    objs = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    suffix = _uid()
    pool = f"it-tas-{suffix}"
    topology = f"it-hostname-{suffix}"
    objs.create_cluster_custom_object(
        KUEUE,
        KV,
        "topologies",
        {
            "apiVersion": f"{KUEUE}/{KV}",
            "kind": "Topology",
            "metadata": {"name": topology},
            "spec": {"levels": [{"nodeLabel": HOSTNAME}]},
        },
    )
    objs.create_cluster_custom_object(
        KUEUE,
        KV,
        "resourceflavors",
        {
            "apiVersion": f"{KUEUE}/{KV}",
            "kind": "ResourceFlavor",
            "metadata": {"name": pool},
            "spec": {"nodeLabels": {POOL_LABEL: pool}, "topologyName": topology},
        },
    )
    nodes = [f"{pool}-node-{i}" for i in range(2)]
    for node in nodes:
        create_ready_node(api, node, {POOL_LABEL: pool}, {CREDITS: str(M), "cpu": "8", "memory": "32Gi", "pods": "110"})
    state = {"flavor": pool, "topology": topology, "nodes": nodes, "namespace": test_namespace, "cleanup": []}
    yield state
    # Best effort, newest first: Workloads, queues, then the pool itself.
    for kind, name in reversed(state["cleanup"]):
        with contextlib.suppress(ApiException):
            if kind in ("workloads", "localqueues"):
                objs.delete_namespaced_custom_object(KUEUE, KV, test_namespace, kind, name)
            else:
                objs.delete_cluster_custom_object(KUEUE, KV, kind, name)
    for node in nodes:
        with contextlib.suppress(ApiException):
            core.delete_node(node)
    with contextlib.suppress(ApiException):
        objs.delete_cluster_custom_object(KUEUE, KV, "resourceflavors", pool)
    with contextlib.suppress(ApiException):
        objs.delete_cluster_custom_object(KUEUE, KV, "topologies", topology)


def make_queues(api, pool: dict, name: str, checks: list[str] | None = None) -> str:
    objs = client.CustomObjectsApi(api)
    spec: dict = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": [CREDITS],
                "flavors": [{"name": pool["flavor"], "resources": [{"name": CREDITS, "nominalQuota": str(2 * M)}]}],
            }
        ],
    }
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    objs.create_cluster_custom_object(
        KUEUE,
        KV,
        "clusterqueues",
        {"apiVersion": f"{KUEUE}/{KV}", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec},
    )
    objs.create_namespaced_custom_object(
        KUEUE,
        KV,
        pool["namespace"],
        "localqueues",
        {
            "apiVersion": f"{KUEUE}/{KV}",
            "kind": "LocalQueue",
            "metadata": {"name": name},
            "spec": {"clusterQueue": name},
        },
    )

    def active():
        cq = objs.get_cluster_custom_object(KUEUE, KV, "clusterqueues", name)
        c = condition(cq, "Active")
        return cq if c and c["status"] == "True" else None

    pool["cleanup"] += [("clusterqueues", name), ("localqueues", name)]
    wait_for(f"ClusterQueue {name} Active", active)
    return name


def make_workload(api, pool: dict, queue: str, cards: int = 1) -> str:
    name = f"wl-{_uid()}"
    pool["cleanup"].append(("workloads", name))
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        KUEUE,
        KV,
        pool["namespace"],
        "workloads",
        {
            "apiVersion": f"{KUEUE}/{KV}",
            "kind": "Workload",
            "metadata": {"name": name},
            "spec": {
                "queueName": queue,
                "podSets": [
                    {
                        "name": "main",
                        "count": 1,
                        "topologyRequest": {"required": HOSTNAME},
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "main",
                                        "image": "gpuctl-it/none",
                                        "resources": {
                                            "requests": {CREDITS: str(cards * M)},
                                            "limits": {CREDITS: str(cards * M)},
                                        },
                                    }
                                ],
                            }
                        },
                    }
                ],
            },
        },
    )
    return name


def get_workload(api, namespace: str, name: str) -> dict:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(KUEUE, KV, namespace, "workloads", name)


def test_tas_workload_gets_quota_and_a_node(api, tas_pool):
    ns = tas_pool["namespace"]
    queue = make_queues(api, tas_pool, f"it-cq-{_uid()}")
    wl = make_workload(api, tas_pool, queue)

    def reserved():
        obj = get_workload(api, ns, wl)
        c = condition(obj, "QuotaReserved")
        return obj if c and c["status"] == "True" else None

    obj = wait_for("QuotaReserved=True", reserved)
    admission = obj["status"]["admission"]
    assert admission["clusterQueue"] == queue
    psa = admission["podSetAssignments"][0]
    assert psa["flavors"][CREDITS] == tas_pool["flavor"]
    ta = psa["topologyAssignment"]
    assert ta["levels"] == [HOSTNAME]
    nodes = assigned_nodes(ta)
    assert len(nodes) == 1 and nodes[0] in tas_pool["nodes"], ta
    # No admission checks on this queue: quota reservation is admission.
    wait_for("Admitted=True", lambda: (condition(get_workload(api, ns, wl), "Admitted") or {}).get("status") == "True")


def test_admission_check_ready_admits_the_workload(api, tas_pool):
    objs = client.CustomObjectsApi(api)
    ns = tas_pool["namespace"]
    try:
        objs.create_cluster_custom_object(
            KUEUE,
            KV,
            "admissionchecks",
            {
                "apiVersion": f"{KUEUE}/{KV}",
                "kind": "AdmissionCheck",
                "metadata": {"name": CHECK_NAME},
                "spec": {"controllerName": CHECK_CONTROLLER},
            },
        )
    except ApiException as exc:
        if exc.status != 409:
            raise
    tas_pool["cleanup"].append(("admissionchecks", CHECK_NAME))
    objs.patch_cluster_custom_object_status(
        KUEUE,
        KV,
        "admissionchecks",
        CHECK_NAME,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Active",
                        "status": "True",
                        "reason": "Ready",
                        "message": "the node-devices admission check controller is running",
                        "lastTransitionTime": _now(),
                    }
                ]
            }
        },
    )
    queue = make_queues(api, tas_pool, f"it-cq-checked-{_uid()}", checks=[CHECK_NAME])
    wl = make_workload(api, tas_pool, queue)

    def pending_check():
        obj = get_workload(api, ns, wl)
        c = condition(obj, "QuotaReserved")
        checks = {c["name"]: c for c in (obj.get("status") or {}).get("admissionChecks") or []}
        return obj if c and c["status"] == "True" and CHECK_NAME in checks else None

    obj = wait_for("quota reserved with the check Pending", pending_check)
    assert {c["name"]: c["state"] for c in obj["status"]["admissionChecks"]}[CHECK_NAME] == "Pending"
    assert (condition(obj, "Admitted") or {}).get("status") != "True"
    nodes = assigned_nodes(obj["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"])
    assert nodes and nodes[0] in tas_pool["nodes"]

    objs.patch_namespaced_custom_object_status(
        KUEUE,
        KV,
        ns,
        "workloads",
        wl,
        {
            "status": {
                "admissionChecks": [
                    {
                        "name": CHECK_NAME,
                        "state": "Ready",
                        "message": "the assigned flavor pool has enough free cards to place the request",
                        "lastTransitionTime": _now(),
                    }
                ]
            }
        },
    )

    def admitted():
        obj = get_workload(api, ns, wl)
        c = condition(obj, "Admitted")
        return obj if c and c["status"] == "True" else None

    obj = wait_for("Admitted=True after the check turned Ready", admitted)
    assert {c["name"]: c["state"] for c in obj["status"]["admissionChecks"]}[CHECK_NAME] == "Ready"


def instance(name: str, **spec) -> dict:
    base = {
        "type": "gpustack--nvidia-a10g-linux-amd64",
        "image": "gpuctl-it/none",
        "volume": {"ephemeral": {"capacity": "10Gi"}},
    }
    base.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Instance", "metadata": {"name": name}, "spec": base}


def test_instance_schema_defaults_as_gpustacks_and_leaves_the_rules_to_the_webhook(api, test_namespace):
    """GPUStack's schema defaults the pull policy and the mount path, and states none of the Instance rules: one
    volume, a partition or a slice — its webhook refuses those (tested with the webhooks)."""
    objs = client.CustomObjectsApi(api)
    name = f"inst-{_uid()}"
    created = objs.create_namespaced_custom_object(
        GROUP, VERSION, test_namespace, "instances", instance(name), field_validation="Strict"
    )
    assert created["spec"]["imagePullPolicy"] == "IfNotPresent"  # schema default
    assert created["spec"]["volumeMount"] == "/workspace"
    assert created["spec"]["privileged"] is False
    objs.delete_namespaced_custom_object(GROUP, VERSION, test_namespace, "instances", name)
    both = instance(f"inst-{_uid()}", volume={"ephemeral": {"capacity": "1Gi"}, "persistent": {"name": "pvc"}})
    stored = objs.create_namespaced_custom_object(GROUP, VERSION, test_namespace, "instances", both, dry_run="All")
    assert stored["spec"]["volume"]["persistent"] == {"name": "pvc"}
    bad_pull = instance(f"inst-{_uid()}", imagePullPolicy="Sometimes")
    with pytest.raises(ApiException) as err:
        objs.create_namespaced_custom_object(GROUP, VERSION, test_namespace, "instances", bad_pull)
    assert err.value.status == 422 and "spec.imagePullPolicy" in err.value.body


def test_devices_ledger_schema(api):
    objs = client.CustomObjectsApi(api)
    name = f"node-{_uid()}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Devices",
        "metadata": {"name": name},
        "spec": {
            "groups": [
                {
                    "id": "a10g",
                    "manufacturer": "nvidia",
                    "name": "NVIDIA A10G",
                    "memory": 23028,
                    "runtimeVersion": "12.4",
                    "accelerators": [
                        {
                            "id": "GPU-0",
                            "index": 0,
                            "physicalIndexes": [0],
                            "topology": {
                                "pciBusId": "0000:10:00.0",
                                "pciRootId": "pci0000:00",
                                "pciClass": "0302",
                                "numaAffinity": "0",
                                "cpuAffinity": "",
                                "pciSwitches": ["0000:0f:00.0"],
                            },
                            "status": {"unhealthy": False, "logicalSliced": {"count": 128}},
                        }
                    ],
                }
            ]
        },
    }
    objs.create_cluster_custom_object(GROUP, VERSION, "devices", body, field_validation="Strict")
    try:
        ledger = {
            "status": {
                "groups": [
                    {
                        "id": "a10g",
                        "manufacturer": "nvidia",
                        "accelerators": [
                            {
                                "id": "GPU-0",
                                "index": 0,
                                "mode": 3,
                                "allocated": 800000,
                                "remaining": 800000,
                                "allocatedSlices": 1,
                                "allocatedLogicalPlacements": [{"start": 0, "length": 4}],
                            }
                        ],
                    }
                ]
            }
        }
        out = objs.patch_cluster_custom_object_status(GROUP, VERSION, "devices", name, ledger)
        row = out["status"]["groups"][0]["accelerators"][0]
        assert row["remaining"] == 800000 and row["allocatedLogicalPlacements"] == [{"start": 0, "length": 4}]
        stored = objs.get_cluster_custom_object(GROUP, VERSION, "devices", name)
        card = stored["spec"]["groups"][0]["accelerators"][0]
        assert card["topology"]["pciSwitches"] == ["0000:0f:00.0"]  # kept, not pruned
        assert stored["spec"]["groups"][0]["runtimeVersion"] == "12.4"
        # A placement is an object, as GPUStack's types have it; a string is refused.
        bad = json.loads(json.dumps(ledger))
        bad["status"]["groups"][0]["accelerators"][0]["allocatedLogicalPlacements"] = ["0-3"]
        with pytest.raises(ApiException) as err:
            objs.patch_cluster_custom_object_status(GROUP, VERSION, "devices", name, bad)
        assert err.value.status == 422
        # A mode is any integer to the schema: gpuctl names a card in one it does not know.
        odd = json.loads(json.dumps(ledger))
        odd["status"]["groups"][0]["accelerators"][0]["mode"] = 9
        objs.patch_cluster_custom_object_status(GROUP, VERSION, "devices", name, odd)
        dup = {"spec": {"groups": [body["spec"]["groups"][0], body["spec"]["groups"][0]]}}
        with pytest.raises(ApiException) as err:
            objs.patch_cluster_custom_object(GROUP, VERSION, "devices", name, dup)
        assert err.value.status == 422 and "Duplicate value" in err.value.body
    finally:
        objs.delete_cluster_custom_object(GROUP, VERSION, "devices", name)

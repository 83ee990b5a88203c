"""The operator's Kubernetes manifests, generated from the webhook registry so the served paths and the registered
ones cannot drift apart.

    python -m gpuctl.operator.manifests deploy/   # writes the kustomizations deploy/{crds,base,cert-manager}, deploy/rbac/
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuctl import __version__
from gpuctl.core import gpustack, naming
from gpuctl.core.gpustack import COMPANION, STANDALONE
from gpuctl.core.webhooks import REGISTRY, RESOURCES, Webhook
from gpuctl.core.webhooks import Kind as WebhookKind

NAMESPACE = naming.OPERATOR_NAMESPACE
NAME = naming.OPERATOR_NAME
MUTATING = naming.MUTATING_CONFIGURATION
VALIDATING = naming.VALIDATING_CONFIGURATION
IMAGE = f"gpuctl-operator:{__version__}"


def webhook_configurations(
    *, ca_bundle: str = "", url: str | None = None, service: tuple[str, str] = (NAMESPACE, NAME)
) -> list[dict[str, Any]]:
    """The mutating and validating configurations: by ``url`` (out of cluster) or by a Service (the operator's)."""

    def client_config(w: Webhook) -> dict[str, Any]:
        cfg: dict[str, Any] = (
            {"url": f"{url}{w.path}"}
            if url
            else {"service": {"name": service[1], "namespace": service[0], "path": w.path, "port": 443}}
        )
        if ca_bundle:
            cfg["caBundle"] = ca_bundle
        return cfg

    mutating = [w.entry(client_config(w)) for w in REGISTRY if w.mutating]
    validating = [w.entry(client_config(w)) for w in REGISTRY if not w.mutating]
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": MUTATING},
            "webhooks": mutating,
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": VALIDATING},
            "webhooks": validating,
        },
    ]


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}


READ = ["get", "list", "watch"]


def operator_role(mode: str = STANDALONE) -> dict[str, Any]:
    """Exactly what the operator reads and writes in ``mode``: the companion reads, and writes only Events (and its
    own Lease, by its namespaced Role); the standalone operator writes what GPUStack's worker would."""
    reads = [
        _rule([""], ["nodes", "pods"], READ),
        _rule(["worker.gpustack.ai"], ["devices", "instancetypes", "instances"], READ),
        _rule(
            ["kueue.x-k8s.io"],
            ["workloads", "clusterqueues", "localqueues", "resourceflavors", "admissionchecks"],
            READ,
        ),
        _rule(["kvcache.gpustack.ai"], ["kvcachepoolbindings", "kvcachepools", "kvcachebackends"], READ),
        # The Events it records: created once, then patched as a series.
        _rule(["events.k8s.io"], ["events"], ["create", "patch"]),
    ]
    if mode == COMPANION:
        # GPUStack's worker Deployment, for the manufacturer settings the chart put on it.
        rules = [*reads, _rule(["apps"], ["deployments"], ["get", "list"])]
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": NAME},
            "rules": rules,
        }
    rules = [
        *reads,
        _rule([""], ["nodes"], ["patch"]),
        _rule(["worker.gpustack.ai"], ["instancetypes/status"], ["patch"]),
        _rule(["worker.gpustack.ai"], ["instances"], ["patch"]),
        _rule(["kueue.x-k8s.io"], ["workloads/status"], ["patch"]),
        _rule(["kueue.x-k8s.io"], ["admissionchecks"], ["create"]),
        _rule(["kueue.x-k8s.io"], ["admissionchecks/status"], ["patch"]),
        # Whether GPUStack's worker runs: it refuses to start where it does.
        {**_rule(["coordination.k8s.io"], ["leases"], ["get"]), "resourceNames": [gpustack.WORKER_LEASE]},
        {
            **_rule(ADMISSION, ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"], ["get", "patch"]),
            "resourceNames": [*gpustack.CONFIGURATIONS, MUTATING, VALIDATING],
        },
        # Its own webhook configurations, registered once it serves (a create cannot be limited by name).
        _rule(ADMISSION, ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"], ["create"]),
        # The worker.gpustack.ai CRDs, created where none exist.
        _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], ["get", "create"]),
    ]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": NAME},
        "rules": rules,
    }


ADMISSION = ["admissionregistration.k8s.io"]


def _role(kind: str, name: str, rules: list[dict[str, Any]], namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata, "rules": rules}


def cli_roles(pools: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The CLI users' roles, the shipped ones (``pools`` None: ``deploy/rbac/gpuctl-cli.yaml``) and those ``gpuctl
    rbac admin`` generates for a cluster's pools:

    - ``gpuctl-view``: every read command;
    - ``gpuctl-admin``: the write commands — InstanceTypes (create, patch, delete), Instances' stop and start, and
      ClusterQueue patches (drain, resume): of every queue in the shipped role, which cannot know the pools'
      names; of exactly the named pools' queues with ``pools`` (``resourceNames``; with no pools, of none, since an
      empty ``resourceNames`` would mean every queue);
    - ``gpuctl-dry-run``: creating Pods and Workloads, which ``webhook dry-run --server-side`` needs and RBAC cannot limit
      to dry runs: bind it per namespace (:func:`dry_run_bindings`), never cluster-wide.
    """
    view = [
        _rule([""], ["nodes", "pods"], READ),
        # simulate resolves the priority classes a manifest names, as Kueue does.
        _rule(["scheduling.k8s.io"], ["priorityclasses"], READ),
        _rule(["worker.gpustack.ai"], ["devices", "instancetypes", "instances"], READ),
        _rule(
            ["kueue.x-k8s.io"],
            [
                "workloads",
                "clusterqueues",
                "localqueues",
                "resourceflavors",
                "admissionchecks",
                "topologies",
                "workloadpriorityclasses",
            ],
            READ,
        ),
        _rule(["kvcache.gpustack.ai"], ["kvcachepoolbindings", "kvcachepools", "kvcachebackends"], READ),
        # explain --history and dump read the Events of Workloads, Pods and the operator.
        _rule(["events.k8s.io"], ["events"], READ),
        _rule(
            ["admissionregistration.k8s.io"], ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"], READ
        ),
        # queue reads Kueue's own pending order from its visibility API.
        _rule(
            ["visibility.kueue.x-k8s.io"], ["clusterqueues/pendingworkloads", "localqueues/pendingworkloads"], ["get"]
        ),
        # doctor reads these by name only: Kueue's Configuration, the two Deployments and the leader Lease.
        {**_rule([""], ["configmaps"], ["get"]), "resourceNames": [naming.KUEUE_CONFIGMAP]},
        {**_rule(["apps"], ["deployments"], ["get"]), "resourceNames": [naming.KUEUE_DEPLOYMENT, naming.OPERATOR_NAME]},
        {
            **_rule(["coordination.k8s.io"], ["leases"], ["get"]),
            "resourceNames": [naming.OPERATOR_NAME, gpustack.WORKER_LEASE],
        },
        # GPUStack's worker Deployment (named after its release, found by its labels): its manufacturer settings.
        _rule(["apps"], ["deployments"], ["list"]),
        # ... and the operator's /readyz and /metrics through the API server's proxy of its webhook Service.
        {
            **_rule([""], ["services/proxy"], ["get"]),
            "resourceNames": [naming.OPERATOR_NAME, f"https:{naming.OPERATOR_NAME}:443"],
        },
    ]
    admin = [
        *view,
        _rule(["worker.gpustack.ai"], ["instancetypes"], ["create", "patch", "delete"]),
        _rule(["worker.gpustack.ai"], ["instances"], ["patch"]),
    ]
    if pools is None:
        admin.append(_rule(["kueue.x-k8s.io"], ["clusterqueues"], ["patch"]))
    elif pools:
        admin.append({**_rule(["kueue.x-k8s.io"], ["clusterqueues"], ["patch"]), "resourceNames": sorted(set(pools))})
    dry_run = [_rule([""], ["pods"], ["create"]), _rule(["kueue.x-k8s.io"], ["workloads"], ["create"])]
    return [
        _role("ClusterRole", "gpuctl-view", view),
        _role("ClusterRole", "gpuctl-admin", admin),
        _role("ClusterRole", "gpuctl-dry-run", dry_run),
    ]


def dry_run_bindings(namespaces: Sequence[str], subjects: Sequence[dict[str, str]]) -> list[dict[str, Any]]:
    """One RoleBinding of ``gpuctl-dry-run`` per namespace an admin may run server dry runs in."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "gpuctl-dry-run", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpuctl-dry-run"},
            "subjects": list(subjects),
        }
        for ns in sorted(set(namespaces))
    ]


def operator_username(namespace: str = NAMESPACE) -> str:
    """The API server's name for the operator's service account."""
    return f"system:serviceaccount:{namespace}:{NAME}"


def _unchanged(fields: Sequence[str], under: str) -> str:
    """CEL: each field (absent or present) is the same in the object and the old object."""
    return " && ".join(f"object.{under}.?{f} == oldObject.{under}.?{f}" for f in fields)


METADATA_FENCED = ("annotations", "finalizers", "ownerReferences")
"""Metadata the operator never changes on the objects it patches (it patches Nodes' labels, Instances' spec.stop)."""


def operator_write_policy(instance_spec_fields: Sequence[str]) -> list[dict[str, Any]]:
    """ValidatingAdmissionPolicies (with their bindings) fencing the operator's own writes beyond what RBAC can say:
    its service account may change only the fit labels of a Node and only ``spec.stop`` of an Instance.

    ``instance_spec_fields`` are the Instance CRD's spec fields (every one but ``stop`` must stay as it was), read from
    the CRD so that a field added to it is fenced too."""
    fit = " || ".join(f"k.startsWith('{p}')" for p in (naming.SLICED_FIT_PREFIX, naming.SHARED_FIT_PREFIX))
    instance = RESOURCES[WebhookKind.INSTANCE]
    labels = [
        {"name": "newLabels", "expression": "object.metadata.?labels.orValue({})"},
        {"name": "oldLabels", "expression": "oldObject.metadata.?labels.orValue({})"},
    ]
    node = (
        "node",
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]},
        f"variables.newLabels.all(k, {fit} || (k in variables.oldLabels && variables.oldLabels[k] == "
        f"variables.newLabels[k])) && variables.oldLabels.all(k, {fit} || k in variables.newLabels) && "
        f"object.?spec == oldObject.?spec && {_unchanged(METADATA_FENCED, 'metadata')}",
        "the gpuctl operator may change only the fit labels of a Node "
        f"({naming.SLICED_FIT_PREFIX}*, {naming.SHARED_FIT_PREFIX}*)",
    )
    stop = (
        "instance",
        {
            "apiGroups": [instance.group],
            "apiVersions": list(instance.versions),
            "operations": ["UPDATE"],
            "resources": [instance.plural],
        },
        f"variables.newLabels == variables.oldLabels && {_unchanged(METADATA_FENCED, 'metadata')} && "
        + _unchanged(sorted(f for f in instance_spec_fields if f != "stop"), "spec"),
        "the gpuctl operator may change only spec.stop of an Instance",
    )
    docs: list[dict[str, Any]] = []
    for what, rule, expression, message in (node, stop):
        name = f"{NAME}-{what}-writes"
        docs.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {"resourceRules": [rule]},
                    "matchConditions": [
                        {"name": "the-operator", "expression": f"request.userInfo.username == '{operator_username()}'"}
                    ],
                    "variables": labels,
                    "validations": [{"expression": expression, "message": message, "reason": "Forbidden"}],
                },
            }
        )
        docs.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {"policyName": name, "validationActions": ["Deny"]},
            }
        )
    return docs


def crd_spec_fields(crd: dict[str, Any]) -> list[str]:
    """The spec fields of every served version of a CRD."""
    fields: set[str] = set()
    for version in crd["spec"]["versions"]:
        if version.get("served", True):
            fields |= set(version["schema"]["openAPIV3Schema"]["properties"]["spec"].get("properties") or {})
    return sorted(fields)


WEBHOOK_PORT = 9443
PROBE_PORT = 8080
PRIVATE_NETWORKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
"""Where the API server reaches the webhooks from, by default: private address space. Narrow it to the control plane's
addresses with ``--apiserver-cidr`` when generating."""
MEMORY_REQUEST = "256Mi"
MEMORY_LIMIT = "768Mi"
"""Sized from ``make bench-scale`` (docs/benchmarks.md): the cache of a 5,000-node cluster, plus reviews admitted by
their cost while the process stays under 55 % of it (``make bench`` measures the peak under the worst mix)."""


def deployment(mode: str = STANDALONE, apiserver_cidrs: Sequence[str] = PRIVATE_NETWORKS) -> list[dict[str, Any]]:
    """The operator's namespace, account, bindings, Deployment, disruption budget, network policy and Service, for
    ``mode``. The standalone operator serves the webhooks over TLS (from the Secret it mounts), creates the CRDs
    where none exist and registers its webhook configurations once it serves; the companion serves only its probes
    and metrics, over plain HTTP."""
    standalone = mode == STANDALONE
    selector = {"app.kubernetes.io/name": NAME}
    labels = {**selector, "app.kubernetes.io/version": __version__}
    probe = {"httpGet": {"path": "/readyz", "port": PROBE_PORT}, "periodSeconds": 5, "failureThreshold": 3}
    live = {"httpGet": {"path": "/healthz", "port": PROBE_PORT}, "periodSeconds": 10, "failureThreshold": 6}
    args = [f"--mode={mode}", "--leader-elect", f"--namespace={NAMESPACE}", f"--probe-port={PROBE_PORT}"]
    ports: list[dict[str, Any]] = [{"name": "probes", "containerPort": PROBE_PORT}]
    service_ports: list[dict[str, Any]] = [{"name": "metrics", "port": PROBE_PORT, "targetPort": PROBE_PORT}]
    ingress: list[dict[str, Any]] = [
        # Probes and metrics: the kubelet and the cluster's scrapers.
        {"ports": [{"protocol": "TCP", "port": PROBE_PORT}]}
    ]
    container: dict[str, Any] = {}
    volumes: dict[str, Any] = {}
    if standalone:
        args = [
            *args,
            "--tls-cert=/tls/tls.crt",
            "--tls-key=/tls/tls.key",
            f"--port={WEBHOOK_PORT}",
            "--install-crds",
            "--register-webhooks",
            f"--webhook-service={NAMESPACE}/{NAME}",
        ]
        ports.insert(0, {"name": "https", "containerPort": WEBHOOK_PORT})
        service_ports.insert(0, {"name": "https", "port": 443, "targetPort": WEBHOOK_PORT})
        # The webhooks: the API server only.
        ingress.insert(
            0,
            {
                "from": [{"ipBlock": {"cidr": cidr}} for cidr in apiserver_cidrs],
                "ports": [{"protocol": "TCP", "port": WEBHOOK_PORT}],
            },
        )
        container["volumeMounts"] = [{"name": "tls", "mountPath": "/tls", "readOnly": True}]
        volumes["volumes"] = [{"name": "tls", "secret": {"secretName": naming.OPERATOR_TLS_SECRET}}]
    else:
        args = [*args, f"--port={PROBE_PORT}", "--bind=0.0.0.0"]
        args.remove(f"--probe-port={PROBE_PORT}")
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": f"{NAME}-leader", "namespace": NAMESPACE},
            "rules": [_rule(["coordination.k8s.io"], ["leases"], ["get", "create", "patch"])],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{NAME}-leader", "namespace": NAMESPACE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{NAME}-leader"},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": NAME,
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        # Two replicas, never on one node: one node's loss leaves one serving.
                        "affinity": {
                            "podAntiAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "labelSelector": {"matchLabels": selector},
                                        "topologyKey": "kubernetes.io/hostname",
                                    }
                                ]
                            }
                        },
                        "topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": "topology.kubernetes.io/zone",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": selector},
                            }
                        ],
                        "containers": [
                            {
                                "name": "operator",
                                "image": IMAGE,
                                "args": args,
                                # The reviews' memory budget is a share of this limit (gpuctl.operator.memory).
                                "env": [
                                    {
                                        "name": "GPUCTL_MEMORY_LIMIT",
                                        "valueFrom": {
                                            "resourceFieldRef": {
                                                "containerName": "operator",
                                                "resource": "limits.memory",
                                            }
                                        },
                                    }
                                ],
                                "ports": ports,
                                "readinessProbe": probe,
                                "livenessProbe": live,
                                "resources": {
                                    "requests": {"cpu": "200m", "memory": MEMORY_REQUEST},
                                    "limits": {"memory": MEMORY_LIMIT},
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                                **container,
                            }
                        ],
                        **volumes,
                    },
                },
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}},
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress"], "ingress": ingress},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            # Labelled for the ServiceMonitor of deploy/monitoring.
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(selector)},
            "spec": {"selector": selector, "ports": service_ports},
        },
    ]


KUSTOMIZATION = "kustomization.yaml"
CERT_MANAGER_ISSUER = f"{NAME}-selfsigned"


def certificate() -> list[dict[str, Any]]:
    """cert-manager's serving certificate for the webhook Service, written to the Secret the Deployment mounts (with
    the ``ca.crt`` the CA injector copies into every webhook's caBundle)."""
    service = f"{NAME}.{NAMESPACE}.svc"
    return [
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {"name": CERT_MANAGER_ISSUER, "namespace": NAMESPACE},
            "spec": {"selfSigned": {}},
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {
                "secretName": naming.OPERATOR_TLS_SECRET,
                "dnsNames": [service, f"{service}.cluster.local"],
                "issuerRef": {"kind": "Issuer", "name": CERT_MANAGER_ISSUER},
            },
        },
    ]


def kustomization(resources: Sequence[str], *, patches: Sequence[str] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    out["resources"] = list(resources)
    if patches:
        out["patches"] = [{"path": p} for p in patches]
    return out


LAYOUT = {
    "companion": "beside GPUStack's worker: reads only",
    "standalone": "in the worker's place, where none runs",
    "standalone-cert-manager": "the standalone operator with a cert-manager serving certificate",
}


def write(root: Path) -> list[Path]:
    """Write under ``root`` (deploy/) the CRDs, the kustomizations of both modes (``companion``, ``standalone``,
    ``standalone-cert-manager``), the CLI roles and the monitoring files; return the files written."""
    import yaml

    from gpuctl.operator import crds as crd_definitions

    header = "# Generated by python -m gpuctl.operator.manifests; do not edit.\n"

    def dump(path: Path, docs: list[dict[str, Any]]) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header + yaml.safe_dump_all(docs, sort_keys=False))
        return path

    definitions = crd_definitions.definitions()
    crd_files = [dump(root / "crds" / crd_definitions.file_name(d), [d]) for d in definitions]
    [instance_crd] = [d for d in definitions if d["spec"]["names"]["kind"] == "Instance"]
    companion, standalone, overlay = (root / name for name in LAYOUT)
    files = [
        *crd_files,
        dump(root / "crds" / KUSTOMIZATION, [kustomization(sorted(p.name for p in crd_files))]),
        dump(companion / "operator.yaml", deployment(COMPANION)),
        dump(companion / "rbac.yaml", [operator_role(COMPANION)]),
        dump(companion / KUSTOMIZATION, [kustomization(["operator.yaml", "rbac.yaml"])]),
        # Every namespaced object names its namespace itself: a namespace transformer would also stamp one on the
        # cluster-scoped admission policies, which kustomize does not know to be cluster-scoped. No CRD and no
        # webhook configuration: the operator creates the CRDs where none exist and registers its webhooks once it
        # serves them.
        dump(standalone / "operator.yaml", deployment(STANDALONE)),
        dump(standalone / "rbac.yaml", [operator_role(STANDALONE)]),
        dump(standalone / "operator-policy.yaml", operator_write_policy(crd_spec_fields(instance_crd))),
        dump(standalone / KUSTOMIZATION, [kustomization(["operator.yaml", "operator-policy.yaml", "rbac.yaml"])]),
        dump(overlay / "certificate.yaml", certificate()),
        dump(overlay / KUSTOMIZATION, [kustomization(["../standalone", "certificate.yaml"])]),
        dump(root / "rbac" / "gpuctl-cli.yaml", cli_roles()),
    ]
    from gpuctl.operator.monitoring import alert_rules, dashboard, service_monitor

    files.append(dump(root / "monitoring" / "prometheus-rules.yaml", [alert_rules()]))
    files.append(dump(root / "monitoring" / "service-monitor.yaml", [service_monitor()]))
    board = root / "monitoring" / "grafana-dashboard.json"
    board.write_text(json.dumps(dashboard(), indent=2) + "\n")
    files.append(board)
    return files


if __name__ == "__main__":
    for p in write(Path(sys.argv[1] if len(sys.argv) > 1 else "deploy")):
        print(p)

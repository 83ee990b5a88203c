"""The checks of Kueue's side of the chain: the ``gpustack-node-devices`` AdmissionCheck, the ClusterQueues that
reference it, Kueue's Configuration (the credits transformations and exclusions, the feature gates) and the TAS
topologies the flavors name.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from gpuctl.core import naming
from gpuctl.core.doctor.records import (
    FAIL,
    OK,
    WARN,
    Finding,
    KueueSettings,
    Transformation,
    parse_transformations,
    shell_word,
    show,
)
from gpuctl.core.instancetypes import InstanceType
from gpuctl.core.ledger import NodeDevices
from gpuctl.core.nodes import Node
from gpuctl.core.units import M
from gpuctl.core.versions import (
    TESTED_KUBERNETES,
    TESTED_KUEUE,
    KueueVersion,
    Version,
    kubernetes_tested,
    tested_range,
    version_text,
)
from gpuctl.core.workloads import AdmissionCheck, ClusterQueue, ResourceFlavor

# ----------------------------------------------------------------------------------------------- the AdmissionCheck


def admission_check(check: AdmissionCheck | None) -> Finding:
    name = "admissioncheck"
    if check is None:
        return Finding(
            name,
            FAIL,
            f"AdmissionCheck {naming.NODE_DEVICES_CHECK} does not exist",
            "gate 3 is this check: without it a queue that references it is inactive and admits nothing; the "
            "operator applies it at start-up and keeps it Active",
            "echo "
            + shell_word(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "AdmissionCheck",
                    "metadata": {"name": naming.NODE_DEVICES_CHECK},
                    "spec": {"controllerName": naming.NODE_DEVICES_CONTROLLER},
                }
            )
            + " | kubectl apply -f -",
        )
    if check.deleting:
        return Finding(
            name,
            FAIL,
            f"AdmissionCheck {check.name} is being deleted (Kueue's finalizer holds it while queues reference it)",
            "once gone, every queue referencing it is inactive and admits nothing",
            f"kubectl get admissioncheck {check.name} -o yaml: find who deleted it; it cannot be undeleted, so once "
            "the queues no longer reference it, recreate it (the operator does at start-up)",
        )
    if check.controller != naming.NODE_DEVICES_CONTROLLER:
        return Finding(
            name,
            FAIL,
            f"AdmissionCheck {check.name} names controller {show(check.controller)} "
            f"(want {naming.NODE_DEVICES_CONTROLLER})",
            "no controller would answer it: every Workload in a queue that references it waits forever",
            f"set spec.controllerName to {naming.NODE_DEVICES_CONTROLLER} (recreate the AdmissionCheck: the field is immutable)",
        )
    if not check.active:
        return Finding(
            name,
            FAIL,
            f"AdmissionCheck {check.name} is not Active" + (f": {check.message}" if check.message else ""),
            "the operator keeps it Active; a queue referencing an inactive check is itself inactive",
            f"kubectl -n {naming.OPERATOR_NAMESPACE} get lease {naming.OPERATOR_NAME} (the leader keeps it Active); "
            f"kubectl -n {naming.OPERATOR_NAMESPACE} logs deployment/{naming.OPERATOR_NAME}",
        )
    return Finding(name, OK, f"AdmissionCheck {check.name} exists, controller {check.controller}, Active")


# ----------------------------------------------------------------------------------------------- queues


def derived_resource_groups(
    it: InstanceType,
    flavors: Mapping[str, ResourceFlavor],
    nodes: Mapping[str, Node],
    devices: Mapping[str, NodeDevices],
) -> list[dict[str, Any]]:
    """The resource groups an accelerated pool's queue holds, derived as the worker's queue reconciler does: one
    group covering ``credits.gpustack.ai/<manufacturer>``, a flavor per card count of the pool's ResourceFlavors
    (smallest per-node count first), each with the credits of the cards its Ready nodes hold (the node's count label,
    else its ledger's cards of the model). Empty when no flavor of the pool has a node."""
    resource = naming.CREDITS_PREFIX + (it.manufacturer or it.accelerator_group.split("-", 1)[0])
    pool = it.pool_labels()
    entries = []
    for f in flavors.values():
        if it.accelerator_group not in f.accelerator_keys or any(
            f.node_labels.get(k) not in (None, v) for k, v in pool.items()
        ):
            continue
        count = f.count_pin(it.accelerator_group)
        cards = 0
        for n in nodes.values():
            if n.ready and all(n.labels.get(k) == v for k, v in f.node_labels.items()):
                label = n.labels.get(naming.accelerator_count_label(it.accelerator_group), "")
                group = devices[n.name].group(it.accelerator_group) if n.name in devices else None
                cards += int(label) if label.isdigit() else len(group.cards) if group is not None else 0
        if cards:
            entries.append((int(count) if count and count.isdigit() else 0, f.name, cards))
    if not entries:
        return []
    return [
        {
            "coveredResources": [resource],
            "flavors": [
                {"name": name, "resources": [{"name": resource, "nominalQuota": str(cards * M)}]}
                for _, name, cards in sorted(entries)
            ],
        }
    ]


def queues(
    cluster_queues: Mapping[str, ClusterQueue],
    instancetypes: Mapping[str, InstanceType],
    check_active: bool,
    flavors: Mapping[str, ResourceFlavor] | None = None,
    nodes: Mapping[str, Node] | None = None,
    devices: Mapping[str, NodeDevices] | None = None,
    owner_fix: str = "",
) -> list[Finding]:
    """Every accelerated pool's queue references the check once it is Active; no queue without resource groups is
    left admitting, and an accelerated one without them is named whatever its stop policy (held, it admits
    nothing). ``owner_fix``: where GPUStack's worker derives the queues (and rewrites any patch), the fix is its,
    never a patch."""
    out = []
    for name, cq in sorted(cluster_queues.items()):
        it = instancetypes.get(name)
        accelerated = it is not None and it.acceleratable
        groups = (
            derived_resource_groups(it, flavors or {}, nodes or {}, devices or {})
            if it is not None and accelerated
            else []
        )
        restore = (
            f"kubectl patch clusterqueue {name} --type merge -p {shell_word({'spec': {'resourceGroups': groups}})}"
            if groups and not owner_fix
            else owner_fix
        )
        if not cq.quotas and cq.stop_policy in ("", "None"):
            out.append(
                Finding(
                    "queue-resources",
                    FAIL,
                    f"ClusterQueue {name} has no resource groups and admits",
                    "a queue that declares no resource checks nothing: it admits every Workload, with no flavor "
                    "and so no AdmissionCheck"
                    + ("; the groups its pool's flavors and nodes derive restore it" if restore else ""),
                    restore
                    or f'kubectl patch clusterqueue {name} --type merge -p \'{{"spec":{{"stopPolicy":"Hold"}}}}\'',
                )
            )
        elif not cq.quotas and accelerated and it is not None:
            label = naming.accelerator_label(it.accelerator_group)
            out.append(
                Finding(
                    "queue-resources",
                    WARN,
                    f"ClusterQueue {name} has no resource groups: on {cq.stop_policy}, its pool admits nothing",
                    "an accelerated queue covers credits.gpustack.ai/<manufacturer> with a flavor per card count of "
                    "its pool; without any, resuming it admits nothing either",
                    restore
                    or "the worker's queue reconciler fills them from the pool's ResourceFlavors "
                    f"(kubectl get resourceflavors -l {label}.count): check its logs; a pool whose nodes are all "
                    "gone stays empty until one returns",
                )
            )
        if it is None or not it.acceleratable or not cq.instancetype_mark:
            continue
        if check_active and naming.NODE_DEVICES_CHECK not in cq.admission_checks:
            out.append(
                Finding(
                    "queue-check",
                    WARN if owner_fix else FAIL,
                    f"ClusterQueue {name} does not reference {naming.NODE_DEVICES_CHECK}",
                    "an accelerated queue references the check once it is Active"
                    + (
                        " and GPUStack's setting instance-type-derived-from-node is on (the default)"
                        if owner_fix
                        else ""
                    )
                    + "; without it nothing judges a Workload card by card, and Allocate refuses what does not fit",
                    (
                        f"kubectl -n gpustack-system get setting instance-type-derived-from-node -o "
                        f"jsonpath='{{.spec.value}}' (true: {owner_fix})"
                    )
                    if owner_fix
                    else f"kubectl patch clusterqueue {name} --type merge -p "
                    f'\'{{"spec":{{"admissionChecksStrategy":{{"admissionChecks":[{{"name":"{naming.NODE_DEVICES_CHECK}"}}]}}}}}}\'',
                )
            )
        else:
            out.append(Finding("queue-check", OK, f"ClusterQueue {name} references {naming.NODE_DEVICES_CHECK}"))
    return out


# ----------------------------------------------------------------------------------------------- Kueue's Configuration


KUEUE_GATES_WANTED: Final[Mapping[str, bool]] = {"AssignQueueLabelsForPods": False, "TopologyAwareScheduling": True}


def kueue_configuration(
    settings: KueueSettings | None,
    wanted_resources: Mapping[str, object],
    configmap: tuple[str, str] = (naming.KUEUE_NAMESPACE, naming.KUEUE_CONFIGMAP),
    manager_deployed: bool = True,
    manufacturers: Collection[str] | None = None,
) -> list[Finding]:
    """The design's Kueue settings: ``AssignQueueLabelsForPods`` off, TAS on, the generated ``credits``
    transformations and exclusions. ``configmap`` is where the Configuration was looked for; ``manager_deployed``
    whether Kueue's manager runs as its Deployment (else a fix restarts it where it runs)."""
    out = []
    if settings is None:
        out.append(
            Finding(
                "kueue-config",
                WARN,
                f"no Kueue Configuration found (ConfigMap {configmap[0]}/{configmap[1]}, "
                f"key {naming.KUEUE_CONFIGMAP_KEY})",
                "the feature gates and resource transformations the design sets cannot be checked",
                "pass --kueue-config NAMESPACE/NAME where Kueue's manager reads its Configuration",
            )
        )
    else:
        restart = (
            f"kubectl -n {settings.namespace} rollout restart deployment {naming.KUEUE_DEPLOYMENT}"
            if manager_deployed
            else f"restart Kueue's manager where it runs (no Deployment {settings.namespace}/{naming.KUEUE_DEPLOYMENT})"
        )
        edit = f"kubectl -n {settings.namespace} edit configmap {settings.name}, then {restart}"
        for gate, want in KUEUE_GATES_WANTED.items():
            have = settings.gate(gate)
            state = "enabled" if have else "disabled"
            if have == want:
                out.append(Finding("kueue-gates", OK, f"{gate} is {state}"))
                continue
            if gate in settings.flag_gates:
                where = f"by --feature-gates of deployment {naming.KUEUE_DEPLOYMENT}"
                fix = (
                    f"kubectl -n {settings.namespace} edit deployment {naming.KUEUE_DEPLOYMENT}: set {gate}="
                    f"{str(want).lower()} in --feature-gates (it overrides the Configuration)"
                )
            else:
                where = f"in {settings.source}" if gate in settings.config_gates else "by Kueue's default"
                fix = f"set featureGates: {{{gate}: {str(want).lower()}}} in key {naming.KUEUE_CONFIGMAP_KEY}: {edit}"
            out.append(
                Finding(
                    "kueue-gates",
                    FAIL,
                    f"{gate} is {state} {where}",
                    "AssignQueueLabelsForPods stays off: long ClusterQueue names do not fit a label value"
                    if gate == "AssignQueueLabelsForPods"
                    else "generated flavors reference Topologies: TopologyAwareScheduling stays on",
                    fix,
                )
            )
        out.append(_resources(settings, wanted_resources, manufacturers, edit))
        if settings.gate("TASBalancedPlacement"):
            out.append(
                Finding(
                    "kueue-gates",
                    OK,
                    "TASBalancedPlacement is enabled (GPUStack's chart turns it on): a PodSet with a preferred "
                    "topology level is placed its way, which simulate says it does not model; required and implied "
                    "levels are placed as without it",
                )
            )
    return out


def _resources(
    settings: KueueSettings, wanted_resources: Mapping[str, object], manufacturers: Collection[str] | None, edit: str
) -> Finding:
    """The ``resources`` block: every accelerator key of the cluster's manufacturers folds into its
    ``credits.gpustack.ai/<manufacturer>`` by M (what both this design and GPUStack's chart write), and every other
    sub-key is kept out of quota — by ``quotaCheckStrategy: IgnoreUndeclared`` (GPUStack's chart), by exclusions
    (this design's generated block) or by a transformation to nothing (GPUStack's runtime install of Kueue 0.18.1)."""
    want_all = {t.input: t for t in parse_transformations(wanted_resources.get("transformations"))}
    have_t = {t.input: t for t in settings.transformations}
    wanted_exclude = wanted_resources.get("excludeResourcePrefixes")
    exclusions = [p for p in wanted_exclude if isinstance(p, str)] if isinstance(wanted_exclude, list) else []
    if have_t == want_all and all(p in settings.exclude_prefixes for p in exclusions):
        return Finding(
            "kueue-resources",
            OK,
            f"{len(want_all)} credits transformations and {len(settings.exclude_prefixes)} exclusions as generated",
        )
    mine = set(manufacturers) if manufacturers is not None else None

    def of_cluster(t: Transformation) -> bool:
        key = naming.classify_resource(t.input)
        return key is not None and (mine is None or key.manufacturer.name in mine)

    folds = {i: t for i, t in want_all.items() if any(v for _, v in t.outputs) and of_cluster(t)}
    rest = {i: t for i, t in want_all.items() if i not in folds and of_cluster(t)}
    wrong = sorted(
        [f"{i} missing" for i in folds if i not in have_t]
        + [
            f"{i} is {_transformation(have_t[i])} (want {_transformation(folds[i])})"
            for i in folds
            if i in have_t and have_t[i] != folds[i]
        ]
    )
    ignored = settings.quota_check_strategy == "IgnoreUndeclared"
    loose = [] if ignored else [i for i in rest if i not in have_t and not _excluded(i, settings.exclude_prefixes)]
    bases = [m.base for m in naming.MANUFACTURERS.values() if mine is None or m.name in mine]
    every_base = [m.base for m in naming.MANUFACTURERS.values()]
    # An exclusion of a manufacturer the cluster has no card of is not needed; one of no manufacturer always is.
    needed = [
        p
        for p in exclusions
        if not any(p.startswith(b + ".") for b in every_base) or any(p.startswith(b + ".") for b in bases)
    ]
    missing_exclude = (
        []
        if ignored
        else [p for p in needed if p not in settings.exclude_prefixes and not _dropped(p, settings.transformations)]
    )
    if wrong or loose or missing_exclude:
        saw = "; ".join(
            [
                *(["transformations: " + ", ".join(wrong[:6]) + (" …" if len(wrong) > 6 else "")] if wrong else []),
                *(["excludeResourcePrefixes lacks " + ", ".join(missing_exclude[:4])] if missing_exclude else []),
                *(
                    [
                        f"quotaCheckStrategy {settings.quota_check_strategy or 'BlockUndeclared (the default)'} and "
                        f"neither excluded nor transformed: {', '.join(sorted(loose)[:4])}"
                        + (" …" if len(loose) > 4 else "")
                    ]
                    if loose
                    else []
                ),
            ]
        )
        return Finding(
            "kueue-resources",
            FAIL,
            f"{settings.source}: {saw}",
            "every accelerator key folds into credits.gpustack.ai/<manufacturer> and its sub-keys are left "
            "out; otherwise quota is charged in the wrong unit or a Workload asks for an undeclared resource",
            f"set resources to what `gpuctl doctor --kueue-resources` prints (or quotaCheckStrategy: "
            f"IgnoreUndeclared with the credits transformations, as GPUStack's chart writes them): {edit}",
        )
    how = (
        "the other keys ignored by quotaCheckStrategy IgnoreUndeclared"
        if ignored
        else "the other keys excluded or transformed to nothing"
    )
    return Finding(
        "kueue-resources",
        OK,
        f"{len(folds)} credits transformations of {', '.join(sorted(mine)) if mine else 'every manufacturer'}; {how}",
    )


def _excluded(resource: str, prefixes: Collection[str]) -> bool:
    return any(resource.startswith(p) for p in prefixes)


def _dropped(prefix: str, transformations: Collection[Transformation]) -> bool:
    """Whether the keys an exclusion prefix names are transformed to nothing instead (GPUStack's runtime install of
    Kueue 0.18.1 drops the slice sub-keys so)."""
    return any(t.input.startswith(prefix) and not any(v for _, v in t.outputs) for t in transformations)


def _transformation(t: Transformation) -> str:
    """A transformation as its Configuration spells it: ``Replace, outputs credits.gpustack.ai/nvidia=1600000``."""
    outputs = ", ".join(f"{k}={v.numerator if v.denominator == 1 else float(v)}" for k, v in t.outputs) or "none"
    return f"{t.strategy}{f', multiplyBy {t.multiply_by}' if t.multiply_by else ''}, outputs {outputs}"


def kueue_topologies(flavors: Mapping[str, ResourceFlavor], topologies: Mapping[str, tuple[str, ...]]) -> list[Finding]:
    """Every Topology a flavor names exists and ends at the hostname level."""
    out = []
    for name in sorted({f.topology_name for f in flavors.values() if f.topology_name}):
        users = sorted(f.name for f in flavors.values() if f.topology_name == name)
        levels = topologies.get(name)
        if levels is None:
            out.append(
                Finding(
                    "kueue-topology",
                    FAIL,
                    f"Topology {name} does not exist (named by ResourceFlavor {', '.join(users[:3])})",
                    "TAS cannot place a Workload in a flavor whose Topology is missing: it stays pending",
                    f"create Topology {name} with levels ending at {naming.LABEL_HOSTNAME}",
                )
            )
        elif not levels or levels[-1] != naming.LABEL_HOSTNAME:
            out.append(
                Finding(
                    "kueue-topology",
                    FAIL,
                    f"Topology {name} ends at {levels[-1] if levels else 'no level'}",
                    "the check judges the nodes TAS assigns: only a hostname-level assignment names them",
                    f"add the level {naming.LABEL_HOSTNAME} last (recreate the Topology: its levels are immutable)",
                )
            )
        else:
            out.append(Finding("kueue-topology", OK, f"Topology {name} ends at {naming.LABEL_HOSTNAME}"))
    return out


def versions(kubernetes: Version | None, kubernetes_source: str, kueue: KueueVersion) -> list[Finding]:
    """The Kubernetes and Kueue versions, against the range gpuctl is tested on (its answers reproduce Kueue's
    decisions, which change between versions)."""
    out = []
    k8s_range = tested_range(TESTED_KUBERNETES)
    if kubernetes is None:
        out.append(
            Finding(
                "kubernetes-version",
                WARN,
                "the API server's version cannot be read" + (f" ({kubernetes_source})" if kubernetes_source else ""),
                f"gpuctl is tested on Kubernetes {k8s_range}",
                "take the snapshot with `gpuctl dump` (it records the version), or run doctor on the cluster",
            )
        )
    elif kubernetes_tested(kubernetes):
        out.append(Finding("kubernetes-version", OK, f"Kubernetes {version_text(kubernetes)} (tested: {k8s_range})"))
    else:
        out.append(
            Finding(
                "kubernetes-version",
                WARN,
                f"Kubernetes {version_text(kubernetes)}, outside the tested {k8s_range}",
                "the API server's validation and scheduling behaviour gpuctl reproduces were checked on "
                f"{k8s_range} only",
                "expect differences; report any answer that does not hold",
            )
        )
    kueue_range = tested_range(TESTED_KUEUE)
    if not kueue.known:
        out.append(
            Finding(
                "kueue-version",
                WARN,
                "Kueue's version cannot be read (no manager Deployment, snapshot record or CRD to read it from)",
                "how Kueue's TAS counts a node's room changed in 0.18: what-ifs assume 0.18 and later",
                "name it with `--kueue-version` on simulate and plan, or grant read access to Kueue's Deployment",
            )
        )
    elif kueue.tested:
        out.append(Finding("kueue-version", OK, f"Kueue {kueue.text} from {kueue.source} (tested: {kueue_range})"))
    else:
        out.append(
            Finding(
                "kueue-version",
                WARN,
                f"Kueue {kueue.text} from {kueue.source}, outside the tested {kueue_range}",
                f"gpuctl reproduces Kueue's decisions as checked against Kueue {kueue_range}",
                "expect what-ifs to differ where this Kueue decides differently",
            )
        )
    return out

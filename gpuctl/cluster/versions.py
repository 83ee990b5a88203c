"""Read which Kubernetes and Kueue a source holds: the API server's version, Kueue's manager image, a snapshot's
record, or the fields Kueue's CRDs serve (in that order of trust); parsed here into :mod:`gpuctl.core.versions`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.cluster import kinds
from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.kinds import Kind
from gpuctl.core import naming
from gpuctl.core.versions import (
    UNKNOWN_KUEUE,
    KueueVersion,
    Version,
    image_version,
    kueue_from_schema,
    parse_version,
)

CRD = Kind("CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions", False)
WORKLOAD_CRD = f"{kinds.WORKLOAD.plural}.{kinds.KUEUE}"


def _map(obj: object, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _dump_record(source: Any) -> Mapping[str, Any]:
    if not getattr(source, "is_snapshot", False):
        return {}
    for obj in source.list(kinds.DUMP):
        return obj if isinstance(obj, Mapping) else {}
    return {}


def kubernetes_version(source: Any) -> tuple[Version | None, str]:
    """The API server's version and where it was read (a snapshot says what its dump recorded)."""
    if getattr(source, "is_snapshot", False):
        text = str(_dump_record(source).get("kubernetesVersion") or "")
        return parse_version(text), ("the snapshot's dump record" if text else "")
    try:
        text = source.server_version()
    except SourceError:
        return None, ""
    return parse_version(text), "the API server"


def _from_deployment(obj: Mapping[str, Any]) -> KueueVersion | None:
    meta = _map(obj, "metadata")
    where = f"deployment {meta.get('namespace', naming.KUEUE_NAMESPACE)}/{meta.get('name', naming.KUEUE_DEPLOYMENT)}"
    raw = _map(_map(_map(obj, "spec"), "template"), "spec").get("containers")
    containers = raw if isinstance(raw, list) else []
    for c in containers:
        if not isinstance(c, Mapping) or not isinstance(c.get("image"), str):
            continue
        found = image_version(c["image"])
        if found is not None and (c.get("name") == "manager" or len(containers) == 1):
            return KueueVersion(found, f"the image of {where}")
    label = _map(meta, "labels").get("app.kubernetes.io/version")
    found = parse_version(label) if isinstance(label, str) else None
    return KueueVersion(found, f"the version label of {where}") if found else None


def _from_crd(obj: Mapping[str, Any]) -> KueueVersion | None:
    """What the Workload CRD's schema tells: how many PodSets a Workload may hold, and whether v1beta1 is served."""
    served_v1beta1: bool | None = None
    max_podsets: int | None = None
    versions = _map(obj, "spec").get("versions")
    for v in versions if isinstance(versions, list) else []:
        if not isinstance(v, Mapping):
            continue
        if v.get("name") == "v1beta1":
            served_v1beta1 = v.get("served") is True
        if v.get("name") == "v1beta2":
            schema = _map(_map(v, "schema"), "openAPIV3Schema")
            podsets = _map(_map(_map(schema, "properties"), "spec"), "properties").get("podSets")
            items = podsets.get("maxItems") if isinstance(podsets, Mapping) else None
            max_podsets = items if isinstance(items, int) else None
    found = kueue_from_schema(max_podsets, served_v1beta1)
    return KueueVersion(found, f"the fields of CRD {WORKLOAD_CRD}") if found else None


def kueue_version(source: Any, given: str | None = None) -> KueueVersion:
    """Kueue's version: ``given`` (a flag), a snapshot's record, the manager's image, the Workload CRD's fields; else
    unknown. A source that may not read the Deployment or the CRD (a view-only role) leaves them out."""
    if given:
        parsed = parse_version(given)
        if parsed is not None:
            return KueueVersion(parsed, "--kueue-version")
    if getattr(source, "is_snapshot", False):
        record = _map(_dump_record(source), "kueueVersion")
        parsed = parse_version(str(record.get("version") or ""))
        if parsed is not None:
            where = str(record.get("source") or "")
            return KueueVersion(
                parsed, f"the snapshot's dump record ({where})" if where else "the snapshot's dump record"
            )
    readers = (
        (kinds.DEPLOYMENT, naming.KUEUE_DEPLOYMENT, naming.KUEUE_NAMESPACE, _from_deployment),
        (CRD, WORKLOAD_CRD, None, _from_crd),
    )
    for kind, name, namespace, read in readers:
        try:
            obj = source.get(kind, name, namespace)
        except SourceError:
            continue
        found = read(obj) if obj else None
        if found is not None:
            return found
    return UNKNOWN_KUEUE


def kueue_gate(source: Any, gate: str) -> bool | None:
    """Whether Kueue runs with a feature gate on, as its manager's ``--feature-gates`` and its Configuration (the
    ConfigMap its manifests mount) say, else its default; None when neither can be read."""
    from gpuctl.cluster.snapshot import load_yaml_text
    from gpuctl.core.doctor import KUEUE_GATE_DEFAULTS, KueueConfigError, parse_deployment, parse_kueue_settings

    namespace, name = naming.KUEUE_NAMESPACE, naming.KUEUE_CONFIGMAP
    try:
        cm = source.get(kinds.CONFIGMAP, name, namespace)
        deployment = source.get(kinds.DEPLOYMENT, naming.KUEUE_DEPLOYMENT, namespace)
    except SourceError:
        return None
    text = _map(cm, "data").get(naming.KUEUE_CONFIGMAP_KEY)
    if not isinstance(text, str) or len(text) > CONFIG_LIMIT:
        return None
    try:
        config = load_yaml_text(f"ConfigMap {namespace}/{name}", text)
        args = parse_deployment(deployment).args if isinstance(deployment, Mapping) else ()
        settings = parse_kueue_settings(config if isinstance(config, Mapping) else {}, args, namespace, name)
    except (SourceError, KueueConfigError):
        return None
    if gate not in settings.flag_gates and gate not in settings.config_gates and gate not in KUEUE_GATE_DEFAULTS:
        return False
    return settings.gate(gate)


CONFIG_LIMIT = 1 << 20
"""The largest Kueue Configuration read (a ConfigMap holds at most 1 MiB)."""

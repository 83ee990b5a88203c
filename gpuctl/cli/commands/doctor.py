"""``gpuctl doctor``: audit the deployed admission chain against the design; one line per finding, with the fix."""

import datetime
import time
from typing import Annotated, Any

import typer

from gpuctl.cli import render
from gpuctl.cli.errors import AnswerNo, UsageError
from gpuctl.cli.registry import OutputFlags, SourceFlags, command
from gpuctl.cli.render import Column, OutputSpec
from gpuctl.cli.source import SourceSpec

COLUMNS = (Column("STATUS"), Column("CHECK"), Column("SAW"), Column("FIX"), Column("WHY", wide_only=True))
CONFIG_LIMIT = 1024 * 1024
"""The largest Kueue Configuration read (bytes of YAML)."""


@command(
    "doctor",
    summary="Audit the admission chain and say how to fix each finding.",
    examples="""
  # Every check on the live cluster; exit 3 when one fails
  gpuctl doctor

  # On a dump attached to a ticket, as JSON
  gpuctl doctor --snapshot ./ticket-4711 -o json

  # The resources block Kueue's Configuration needs (the credits transformations and exclusions)
  gpuctl doctor --kueue-resources""",
    listed=90,
    source=SourceFlags(),
    output=OutputFlags(sort=False),
)
def doctor_command(
    retry_minutes: Annotated[
        int, typer.Option("--retry-minutes", min=1, help="Report Workloads the check has held at Retry for longer.")
    ] = 30,
    inactive_grace: Annotated[
        int,
        typer.Option(
            "--inactive-grace",
            metavar="SECONDS",
            min=0,
            help="Report an inactive InstanceType whose ClusterQueue still admits after this long.",
        ),
    ] = 120,
    kueue_config: Annotated[
        str,
        typer.Option("--kueue-config", metavar="NAMESPACE/NAME", help="The ConfigMap holding Kueue's Configuration."),
    ] = "kueue-system/kueue-manager-config",
    operator_namespace: Annotated[
        str, typer.Option("--operator-namespace", help="Where the operator's Deployment and leader Lease live.")
    ] = "gpuctl-system",
    gpustack_namespace: Annotated[
        str, typer.Option("--gpustack-namespace", help="Where GPUStack's worker, its Lease and settings live.")
    ] = "gpustack-system",
    probe: Annotated[
        bool,
        typer.Option(
            "--probe/--no-probe",
            help="On a live cluster, reach the webhook endpoints and send dry-run reviews through the API server.",
        ),
    ] = True,
    kueue_resources: Annotated[
        bool,
        typer.Option("--kueue-resources", help="Print the resources block Kueue's Configuration needs, and exit."),
    ] = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Check the admission chain: the webhooks against this version's registry (and, live, their endpoints and
    dry-run reviews that show each probed webhook ran), the gpustack-node-devices AdmissionCheck, the accelerated
    queues, inactive pools whose queue still admits, Kueue's Configuration, every pool (its entrance, queues,
    published views, Devices and fit labels), orphaned Devices, stuck work and the operator's health; exit 3 when a
    check fails. Runs the same on a live cluster and on a dump attached to a ticket (without the probes; ages are
    measured from when the dump was taken)."""
    from gpuctl.cli.usecases import disagreements
    from gpuctl.cluster import kinds, read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.cluster.live import LiveSource
    from gpuctl.cluster.versions import kubernetes_version, kueue_version
    from gpuctl.core import credits, doctor, gpustack, naming
    from gpuctl.core.doctor import gpustack as gpustack_doctor
    from gpuctl.core.workloads import parse_local_queue

    if kueue_resources:
        import yaml

        typer.echo(yaml.safe_dump({"resources": credits.kueue_resources_config()}, sort_keys=False), nl=False)
        return
    config_ns, slash, config_name = kueue_config.partition("/")
    if not slash or not config_ns or not config_name:
        raise UsageError(f"--kueue-config {kueue_config}: give NAMESPACE/NAME, e.g. kueue-system/kueue-manager-config")
    opened = source.open()
    # On a dump, every age (the leader's renewal, a Retry, an inactive pool) is measured from when it was taken.
    now = read.taken_at(opened) or time.time()
    moment = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
    with bulk_allocation():
        check = read.admission_check(opened, naming.NODE_DEVICES_CHECK)
        queues = read.cluster_queues(opened)
        types = {t.name: t for t in read.instancetypes(opened)}
        presence = read.worker_presence(opened, gpustack_namespace)
        beside = presence is not None and presence.runs(moment)
        worker = read.worker_deployment(opened, gpustack_namespace) if beside else None
        worker_name = str((worker or {}).get("metadata", {}).get("name") or "")
        entries, webhook_findings = _webhooks(opened, operator_namespace, beside)
        flavors = read.flavors(opened)
        nodes = {n.name: n for n in read.nodes(opened)}
        ledgers = read.ledgers(opened, nodes)
        kubernetes, kubernetes_source = kubernetes_version(opened)
        kueue = kueue_version(opened)
        pods = read.pods(opened)
        # Where GPUStack's worker runs it owns the queues, the checks and the statuses: its fixes are its own.
        owner_fix = gpustack_doctor.restart_worker(gpustack_namespace, worker_name) if beside else ""
        writer_fix = (
            f"GPUStack's worker writes it: check it with kubectl -n {gpustack_namespace} logs "
            + (f"deployment/{worker_name}" if worker_name else f"-l {gpustack.WORKER_SELECTOR}")
            if beside
            else f"the gpuctl operator writes it: check it with kubectl -n {operator_namespace} logs "
            f"-l app.kubernetes.io/name={naming.OPERATOR_NAME}"
        )
        findings = [
            *doctor.versions(kubernetes, kubernetes_source, kueue),
            *_operator_mode(opened, presence, moment, operator_namespace),
            *webhook_findings,
            *(
                gpustack_doctor.checks(read.admission_checks(opened), queues, presence, worker_name)
                if beside and presence is not None
                else [doctor.admission_check(check)]
            ),
            *doctor.queues(
                queues,
                types,
                check is not None and check.active,
                flavors,
                nodes,
                {d.node: d for d in ledgers.served},
                owner_fix=owner_fix,
            ),
            *doctor.inactive_pools(types, queues, now, inactive_grace, owner_fix=owner_fix),
            *_kueue(opened, config_ns, config_name, {g.manufacturer for d in ledgers.served for g in d.groups}),
            *doctor.kueue_topologies(flavors, _topologies(opened)),
            *doctor.pools(
                types,
                queues,
                [parse_local_queue(o) for o in opened.list(kinds.LOCALQUEUE)],
                ledgers.served,
                nodes,
                writer_fix=writer_fix,
            ),
            *gpustack_doctor.disagreements(disagreements(opened), writer_fix),
            *doctor.orphaned_devices(ledgers.orphaned),
            *doctor.unreadable_cards(ledgers.served),
            *doctor.stuck(read.workloads(opened), pods, now, retry_minutes),
            *doctor.placement_loops(kueue.tas_charges_raw_requests, types, nodes, pods),
            *_drain_stopped(opened, types, queues),
            *([] if beside else _operator(opened, entries, operator_namespace, now)),
        ]
        if probe and isinstance(opened, LiveSource) and entries and not beside:
            namespace = source.namespace or opened.default_namespace() or "default"
            deployed = _operator_deployed(opened, operator_namespace)
            findings += _probes(opened, entries, namespace, operator_namespace, deployed)
    items: list[dict[str, Any]] = [f.to_dict() for f in findings]
    render.emit(
        render.Listing(
            "DoctorFinding",
            items,
            COLUMNS,
            lambda i: [i["status"], i["check"], i["saw"], i["fix"] or "-", i["why"] or "-"],
        ),
        output,
    )
    if any(f.status == doctor.FAIL for f in findings):
        raise AnswerNo("")


def _unreadable(check: str, what: str, exc: Exception, why: str) -> Any:
    from gpuctl.core import doctor

    return doctor.Finding(
        check,
        doctor.WARN,
        f"cannot read {what}: {exc}",
        why,
        "grant the gpuctl-view role (deploy/rbac/gpuctl-cli.yaml), which reads it",
    )


def _webhooks(opened: Any, operator_namespace: str, beside: bool) -> tuple[list[Any], list[Any]]:
    """The deployed webhook entries and their audit, or one warning when the configurations cannot be read. Beside
    GPUStack's worker, its own entries are audited; elsewhere the standalone operator's."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import SourceError
    from gpuctl.core import doctor

    try:
        configs = [*opened.list(kinds.MUTATING_WEBHOOKS), *opened.list(kinds.VALIDATING_WEBHOOKS)]
    except SourceError as exc:
        why = "the webhooks hold gate 1 and the KV-cache and pool rules"
        return [], [_unreadable("webhook", "the webhook configurations", exc, why)]
    if not configs and getattr(opened, "is_snapshot", False):
        return [], [
            doctor.Finding(
                "webhook",
                doctor.WARN,
                "webhook configurations are not in the snapshot: whether the webhooks are registered cannot be told",
                "the webhooks hold gate 1 and the KV-cache and pool rules",
                "take the snapshot with `gpuctl dump` (it writes them), or run doctor on the cluster",
            )
        ]
    entries = [e for c in configs for e in doctor.parse_webhook_configuration(c)]
    if beside:
        from gpuctl.cluster import read
        from gpuctl.core.doctor import gpustack as gpustack_doctor

        presence = read.worker_presence(opened, "gpustack-system")
        if presence is not None:
            return entries, gpustack_doctor.webhooks(entries, presence)
    return entries, doctor.webhooks(entries, operator_namespace)


def _kueue(opened: Any, namespace: str, name: str, manufacturers: set[str]) -> list[Any]:
    """Kueue's Configuration from its ConfigMap and the manager's --feature-gates, audited."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import SourceError
    from gpuctl.cluster.snapshot import load_yaml_text
    from gpuctl.core import credits, doctor, naming

    where = f"ConfigMap {namespace}/{name}"
    why = "the feature gates and resource transformations the design sets cannot be checked"
    try:
        cm = opened.get(kinds.CONFIGMAP, name, namespace)
        deployment = opened.get(kinds.DEPLOYMENT, naming.KUEUE_DEPLOYMENT, namespace)
    except SourceError as exc:
        return [_unreadable("kueue-config", where, exc, why)]
    data = (cm or {}).get("data") or {}
    text = data.get(naming.KUEUE_CONFIGMAP_KEY) if isinstance(data, dict) else None
    if not isinstance(text, str):
        return doctor.kueue_configuration(
            None, credits.kueue_resources_config(), (namespace, name), True, manufacturers or None
        )
    problem = ""
    config: object = None
    if len(text) > CONFIG_LIMIT:
        problem = f"is larger than {CONFIG_LIMIT} bytes"
    else:
        try:
            config = load_yaml_text(f"{where} key {naming.KUEUE_CONFIGMAP_KEY}", text)
        except SourceError as exc:
            problem = str(exc)
    settings = None
    if not problem and not isinstance(config, dict):
        problem = "is not a Configuration mapping"
    elif not problem and isinstance(config, dict):
        args = doctor.parse_deployment(deployment).args if isinstance(deployment, dict) else ()
        try:
            settings = doctor.parse_kueue_settings(config, args, namespace, name)
        except doctor.KueueConfigError as exc:
            problem = str(exc)
    if settings is None:
        return [
            doctor.Finding(
                "kueue-config",
                doctor.FAIL,
                problem if problem.startswith(where) else f"{where}: {naming.KUEUE_CONFIGMAP_KEY} {problem}",
                "Kueue's manager does not start on a Configuration it cannot decode",
                f"kubectl -n {namespace} edit configmap {name}",
            )
        ]
    return doctor.kueue_configuration(
        settings,
        credits.kueue_resources_config(),
        (namespace, name),
        manager_deployed=deployment is not None,
        manufacturers=manufacturers or None,
    )


def _drain_stopped(opened: Any, types: Any, queues: Any) -> list[Any]:
    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import SourceError
    from gpuctl.core import doctor
    from gpuctl.core.instances import parse_instance

    try:
        instances = [parse_instance(o) for o in _optional_list(opened, kinds.INSTANCE)]
    except SourceError as exc:
        return [_unreadable("drain-stopped", "the Instances", exc, "a drain's stops outlive the pool's resume")]
    return doctor.drain_stopped(instances, types, queues)


def _optional_list(opened: Any, kind: Any) -> list[Any]:
    """The objects of a kind a cluster may not serve (its CRD not installed): none then."""
    from gpuctl.cluster.errors import SourceError

    try:
        return list(opened.list(kind))
    except SourceError as exc:
        if "is not served" in str(exc):
            return []
        raise


def _topologies(opened: Any) -> dict[str, tuple[str, ...]]:
    from gpuctl.cluster import kinds
    from gpuctl.core.tas import parse_topology

    return dict(parse_topology(o) for o in _optional_list(opened, kinds.TOPOLOGY))


def _operator(opened: Any, entries: list[Any], namespace: str, now: float) -> list[Any]:
    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import SourceError
    from gpuctl.core import doctor, naming

    try:
        deployment = opened.get(kinds.DEPLOYMENT, naming.OPERATOR_NAME, namespace)
        lease = opened.get(kinds.LEASE, naming.OPERATOR_NAME, namespace)
    except SourceError as exc:
        why = "a webhook with no replica behind it refuses every Pod it selects"
        return [_unreadable("operator-replicas", "the operator's Deployment and Lease", exc, why)]
    return doctor.operator_health(
        doctor.parse_deployment(deployment) if deployment else None,
        doctor.parse_lease(lease) if lease else None,
        any(e.service is not None for e in entries if e.ours),
        namespace,
        now,
        entries,
    )


def _operator_mode(opened: Any, presence: Any, moment: Any, namespace: str) -> list[Any]:
    """Which gpuctl operator runs beside (or in the place of) GPUStack's worker."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import SourceError
    from gpuctl.core import doctor, naming
    from gpuctl.core.doctor import gpustack as gpustack_doctor

    if presence is None:
        why = "the standalone operator must never run beside GPUStack's worker"
        return [
            _unreadable(
                "operator-mode", "GPUStack's worker Lease and webhook configurations", Exception("forbidden"), why
            )
        ]
    try:
        deployment = opened.get(kinds.DEPLOYMENT, naming.OPERATOR_NAME, namespace)
    except SourceError:
        deployment = None
    return gpustack_doctor.operator_mode(
        presence, moment, doctor.parse_deployment(deployment) if deployment else None, namespace
    )


def _operator_deployed(opened: Any, namespace: str) -> bool:
    """Whether the operator runs as its Deployment (its fixes then name its Pods and logs)."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import SourceError
    from gpuctl.core import naming

    try:
        return opened.get(kinds.DEPLOYMENT, naming.OPERATOR_NAME, namespace) is not None
    except SourceError:
        return True  # not readable: assume the documented install


def _probes(live: Any, entries: list[Any], namespace: str, operator_namespace: str, deployed: bool) -> list[Any]:
    import sys
    from concurrent.futures import ThreadPoolExecutor

    from gpuctl.cluster.probe import dry_run_reviews, probe_endpoints
    from gpuctl.core import doctor

    # A healthy endpoint answers /readyz in milliseconds: a few seconds tell a hung one without waiting the
    # request timeout out. The dry runs are given each webhook's own timeout (and a margin), side by side.
    timeout = min(live.connection.timeouts()[1], ENDPOINT_DEADLINE)
    terminal = sys.stderr.isatty()
    if terminal:
        sys.stderr.write("doctor: probing the webhooks' endpoints and sending dry runs through them...")
        sys.stderr.flush()
    try:
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="gpuctl-probe") as pool:
            probed = pool.submit(probe_endpoints, live, entries, timeout)
            reviewed = pool.submit(dry_run_reviews, live, entries, namespace)
            endpoints, reviews = probed.result(), reviewed.result()
    finally:
        if terminal:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
    return [
        *doctor.endpoints(endpoints, entries, operator_namespace, deployed),
        *doctor.live_reviews(reviews, entries, operator_namespace, deployed),
    ]


ENDPOINT_DEADLINE = 5.0
"""Seconds a webhook endpoint's /readyz may take before doctor calls it unanswered."""

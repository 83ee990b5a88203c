"""Living beside GPUStack's worker: whether it runs (its Lease, its webhook configurations), what its settings say
(its Deployment's environment), and what the operator does at start in each mode — the companion reads the worker's
manufacturer names and takes nothing; the standalone refuses to start beside the worker and creates only the CRDs
that do not exist."""

from __future__ import annotations

import argparse
import datetime
import logging
from typing import Any

import pytest

from gpuctl.cluster import kinds
from gpuctl.core import gpustack, naming
from gpuctl.operator import beside, crds
from testbed.standin import worker_deployment, worker_lease
from tests.memory_cluster import MemoryCluster

NOW = datetime.datetime(2026, 12, 7, 12, 0, 0, tzinfo=datetime.timezone.utc)
HYGON = {"GPUSTACK_HYGON_ACCELERATABLE_RESOURCE_NAME": "hygon.com/gpu"}
log = logging.getLogger("test")


def at(seconds_ago: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture(autouse=True)
def default_names() -> Any:
    yield
    naming.set_manufacturers(naming.DEFAULT_TABLE)


# ----------------------------------------------------------------------------------------------- whether it runs


def test_a_lease_renewed_within_its_duration_says_the_worker_runs() -> None:
    presence = gpustack.worker_presence(worker_lease(at(5)), [])
    assert presence.runs(NOW)
    refusal = gpustack.standalone_refusal(presence, NOW)
    assert refusal is not None and "\n" not in refusal
    assert "Lease gpustack-system/worker.gpustack.ai held by" in refusal and "--mode companion" in refusal


def test_a_lease_long_expired_and_no_configuration_says_it_does_not() -> None:
    presence = gpustack.worker_presence(worker_lease(at(3600)), [])
    assert not presence.runs(NOW) and gpustack.standalone_refusal(presence, NOW) is None
    assert not gpustack.worker_presence(None, ["some-other-configuration"]).runs(NOW)


def test_its_webhook_configurations_alone_say_it_is_there() -> None:
    presence = gpustack.worker_presence(None, [gpustack.VALIDATING_CONFIGURATION])
    refusal = gpustack.standalone_refusal(presence, NOW)
    assert refusal is not None and "webhook configurations gpustack-worker-validation" in refusal


def test_its_deployment_is_known_by_the_charts_labels_and_its_settings_read_by_value() -> None:
    d = worker_deployment({**HYGON, "OTHER": "x"})
    assert gpustack.is_worker_deployment(d)
    assert gpustack.worker_environment(d) == HYGON
    relabelled = {**d, "metadata": {**d["metadata"], "labels": {"app": "worker"}}}
    assert not gpustack.is_worker_deployment(relabelled)


def test_worker_settings_on_the_command_line() -> None:
    assert gpustack.parse_worker_env(["GPUSTACK_HYGON_ACCELERATABLE_RESOURCE_NAME=hygon.com/gpu"]) == HYGON
    with pytest.raises(ValueError, match="--worker-env 'PATH=/bin': give one of the worker's settings as NAME=VALUE"):
        gpustack.parse_worker_env(["PATH=/bin"])


def test_a_parked_workload_is_deactivated_with_the_joint_checks_marker() -> None:
    message = f"waited 30m0s for the other roles: {gpustack.PARKED_MARKER}"
    assert gpustack.parked(False, message)
    assert not gpustack.parked(True, message)  # reactivated
    assert not gpustack.parked(False, "waiting for the other roles")  # deactivated by someone else
    assert not gpustack.parked(False, None)


# ----------------------------------------------------------------------------------------------- at start


def args(mode: str, **extra: Any) -> argparse.Namespace:
    return argparse.Namespace(
        mode=mode,
        gpustack_namespace=gpustack.WORKER_NAMESPACE,
        worker_settings=extra.pop("worker_settings", {}),
        install_crds=extra.pop("install_crds", False),
    )


def test_the_companion_puts_the_workers_resource_names_in_force_and_writes_nothing() -> None:
    cluster = MemoryCluster([worker_deployment(HYGON), worker_lease(at(1))])
    beside.start(cluster, args(gpustack.COMPANION), log)  # type: ignore[arg-type]
    assert naming.MANUFACTURERS["hygon"].base == "hygon.com/gpu"
    assert cluster.writes == []


def test_the_companion_without_a_worker_keeps_gpustacks_default_names() -> None:
    cluster = MemoryCluster()
    beside.start(cluster, args(gpustack.COMPANION), log)  # type: ignore[arg-type]
    assert naming.MANUFACTURERS["hygon"].base == naming.DEFAULT_TABLE["hygon"].base
    assert cluster.writes == []


def test_the_standalone_refuses_to_start_beside_the_worker_and_writes_nothing() -> None:
    renewed = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster = MemoryCluster([worker_lease(renewed)])
    with pytest.raises(beside.Refused, match="GPUStack's worker runs on this cluster"):
        beside.start(cluster, args(gpustack.STANDALONE, install_crds=True), log)  # type: ignore[arg-type]
    assert cluster.writes == []


def test_the_standalone_creates_only_the_crds_that_do_not_exist() -> None:
    first, *others = crds.definitions()
    cluster = MemoryCluster([first])
    beside.start(cluster, args(gpustack.STANDALONE, install_crds=True), log)  # type: ignore[arg-type]
    created = [w.name for w in cluster.writes if w.kind == kinds.CRD.kind]
    assert created == [d["metadata"]["name"] for d in others]
    assert {w.patch_type for w in cluster.writes} == {"create"}


def test_an_override_the_worker_could_not_apply_refuses_the_start_in_one_line() -> None:
    bad = {"GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME": "nvidia.com/gpu"}
    with pytest.raises(beside.Refused, match="names both amd and nvidia"):
        beside.start(MemoryCluster(), args(gpustack.COMPANION, worker_settings=bad), log)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------- the CLI, live


def test_a_live_read_puts_the_workers_names_in_force_and_the_flag_overrides_them() -> None:
    from gpuctl.cli.errors import UsageError
    from gpuctl.cli.source import SourceSpec

    cluster = MemoryCluster([worker_deployment(HYGON)])
    SourceSpec().manufacturers(cluster)
    assert naming.MANUFACTURERS["hygon"].base == "hygon.com/gpu"
    elsewhere = MemoryCluster([worker_deployment(HYGON, namespace="other")])
    SourceSpec().manufacturers(elsewhere)  # not in GPUStack's namespace: not its worker
    assert naming.MANUFACTURERS["hygon"].base == naming.DEFAULT_TABLE["hygon"].base
    given = "GPUSTACK_HYGON_ACCELERATABLE_RESOURCE_NAME=hygon.com/dcu2"
    SourceSpec(worker_env=(given,)).manufacturers(cluster)
    assert naming.MANUFACTURERS["hygon"].base == "hygon.com/dcu2"
    with pytest.raises(UsageError, match="--worker-env 'hygon'"):
        SourceSpec(worker_env=("hygon",)).manufacturers(cluster)


# ----------------------------------------------------------------------------------------------- doctor beside it


def test_doctor_fails_a_standalone_operator_beside_the_worker_and_passes_the_companion() -> None:
    from gpuctl.core.doctor import gpustack as audit
    from gpuctl.core.doctor.records import FAIL, OK, WARN, DeploymentRecord

    runs = gpustack.worker_presence(worker_lease(at(2)), [])
    gone = gpustack.worker_presence(None, [])

    def operator(mode: str) -> DeploymentRecord:
        return DeploymentRecord("gpuctl-system", "gpuctl-operator", 1, 1, ("gpuctl-operator", f"--mode={mode}"))

    [standalone] = audit.operator_mode(runs, NOW, operator(gpustack.STANDALONE), "gpuctl-system")
    assert standalone.status == FAIL and "deploy/companion" in standalone.fix
    [companion] = audit.operator_mode(runs, NOW, operator(gpustack.COMPANION), "gpuctl-system")
    assert companion.status == OK and "runs as the companion" in companion.saw
    [alone] = audit.operator_mode(gone, NOW, operator(gpustack.COMPANION), "gpuctl-system")
    assert alone.status == WARN and "deploy/standalone" in alone.fix


def test_doctor_judges_gpustacks_entries_and_checks_and_its_fixes_restart_the_worker() -> None:
    from gpuctl.core.doctor import gpustack as audit
    from gpuctl.core.doctor.records import FAIL, OK, parse_webhook_configuration
    from gpuctl.core.workloads import parse_admission_check
    from testbed.standin import admission_checks, webhook_configurations

    presence = gpustack.worker_presence(worker_lease(at(2)), list(gpustack.CONFIGURATIONS))
    configurations = webhook_configurations("Q0E=")
    entries = [e for c in configurations for e in parse_webhook_configuration(c)]
    assert {f.status for f in audit.webhooks(entries, presence)} == {OK}
    dropped = entries[0]
    found = audit.webhooks([e for e in entries if e is not dropped], presence)
    [missing] = [f for f in found if f.status == FAIL]
    assert missing.saw.endswith(f"has no entry {dropped.name}")
    assert missing.fix.startswith("kubectl -n gpustack-system rollout restart")
    checks = {c["metadata"]["name"]: parse_admission_check(c) for c in admission_checks()}
    assert [f.status for f in audit.checks(checks, {}, presence)] == [OK, OK]
    del checks[gpustack.JOINT_CHECK]
    [_, joint] = audit.checks(checks, {}, presence)
    assert joint.status == FAIL and joint.saw == f"AdmissionCheck {gpustack.JOINT_CHECK} does not exist"
    every_fix = [f.fix for f in (*found, joint)]
    assert not any("kubectl patch" in fix or "kubectl apply" in fix for fix in every_fix)

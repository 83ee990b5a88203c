"""No request for a Kueue API version the cluster does not serve: the CLI and the operator, each as a user of its own,
read and write Kueue's objects on the version the server serves, as the API server's audit log shows.

Run on every control plane; on ``primary-v1beta2`` (Kueue's CRDs serve only ``v1beta2``, as Kueue 0.20 ships them)
it is the test that a cluster without ``kueue.x-k8s.io/v1beta1`` never sees a request for it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from typer.testing import CliRunner

from gpuctl.cli.main import app
from testbed.gpucluster import condition, new_pool, wait_for
from testbed.operator_process import running_operator

CLI_USER = "gpuctl-it-api-versions-cli"
OPERATOR_USER = "gpuctl-it-api-versions-operator"
KUEUE_V1BETA1 = "/apis/kueue.x-k8s.io/v1beta1"


def _audited(control_plane: Any, users: set[str]) -> list[dict[str, Any]]:
    out = []
    for line in control_plane.audit_log.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (event.get("user") or {}).get("username") in users:
            out.append(event)
    return out


def test_the_cli_and_the_operator_ask_only_for_served_kueue_versions(
    api: Any, test_namespace: str, control_plane: Any, tmp_path: Path
) -> None:
    cli = control_plane.write_kubeconfig(tmp_path / "cli.kubeconfig", CLI_USER, ["system:masters"])
    operator = control_plane.write_kubeconfig(tmp_path / "operator.kubeconfig", OPERATOR_USER, ["system:masters"])
    groups = client.ApisApi(api).get_api_versions().groups
    served = {v.version for g in groups if g.name == "kueue.x-k8s.io" for v in g.versions}
    assert ("v1beta1" in served) == control_plane.versions.kueue_serves_v1beta1, served
    pool = new_pool(api, test_namespace, nodes=1, cards=2, nominal_cards=2)
    (tmp_path / "op").mkdir()
    try:
        with running_operator(control_plane, tmp_path / "op", kubeconfig=operator):
            name = pool.submit("versions-one-card", {"nvidia.com/gpu": "1"})
            wait_for(
                "the operator's check answers",
                lambda: (
                    bool((pool.workload(name).get("status") or {}).get("admissionChecks"))
                    and any(
                        c.get("state") in ("Ready", "Retry") for c in pool.workload(name)["status"]["admissionChecks"]
                    )
                ),
                timeout=90,
            )
            runner = CliRunner()
            dump = tmp_path / "dump"
            for args in (
                ["views"],
                ["workloads", "-A"],
                ["explain", "workload", f"{test_namespace}/{name}"],
                ["queue"],
                ["usage", "-A"],
                ["doctor", "--no-probe"],
                ["hold", pool.name, "--dry-run=server"],
                ["dump", str(dump)],
                ["simulate", "--workload", f"{test_namespace}/{name}"],
            ):
                result = runner.invoke(app, [*args, "--kubeconfig", str(cli)])
                assert result.exit_code in (0, 3), (args, result.stderr)
            assert (condition(pool.workload(name), "QuotaReserved") or {}).get("status") == "True"
            time.sleep(2)  # the audit backend writes in batches
    finally:
        pool.cleanup()
    events = _audited(control_plane, {CLI_USER, OPERATOR_USER})
    by_user = {u: [e for e in events if e["user"]["username"] == u] for u in (CLI_USER, OPERATOR_USER)}
    assert by_user[CLI_USER] and by_user[OPERATOR_USER], "the audit log holds no Kueue request of either user"
    asked = sorted({(e["user"]["username"], e["requestURI"].split("?")[0]) for e in events})
    wrong = [(u, uri) for u, uri in asked if uri.startswith(KUEUE_V1BETA1) and "v1beta1" not in served]
    assert not wrong, wrong
    # Where v1beta2 is served, nothing falls back to v1beta1 either.
    assert not [(u, uri) for u, uri in asked if uri.startswith(KUEUE_V1BETA1)], asked

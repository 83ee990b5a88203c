"""The kubectl contract, held against the control plane's own kubectl: the same selectors choose the same objects
(live, where gpuctl sends them to the server, and on a dump of the cluster, where it evaluates them), names printed
by ``-o name`` go back into kubectl and into gpuctl, ``metadata.name`` columns and JSONPath templates print the
same text, ``--sort-by`` fails as kubectl fails, and every command exits 1 on a missing object and 2 on a flag it
does not know — in one line that points at its help."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer.main
from kubernetes import client
from typer.testing import CliRunner

from gpuctl.cli.main import app
from testbed.factories import instancetype
from testbed.gpucluster import KUEUE, KV, WORKER, WV

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Cluster:
    kubeconfig: str
    kubectl_bin: Path
    suffix: str
    namespaces: tuple[str, str]
    dump: Path

    def kubectl(self, *args: str) -> tuple[int, str, str]:
        proc = subprocess.run(
            [str(self.kubectl_bin), "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return proc.returncode, proc.stdout, proc.stderr

    def gpuctl(self, *args: str, snapshot: bool = False) -> tuple[int, str, str]:
        where = ["--snapshot", str(self.dump)] if snapshot else ["--kubeconfig", self.kubeconfig]
        result = runner.invoke(app, [*args, *where])
        return result.exit_code, result.stdout, result.stderr


def _types(suffix: str) -> list[dict[str, Any]]:
    """Four InstanceTypes whose labels tell the selectors apart (a dotted key, an empty value, a number)."""
    marks = {
        "a": {"tier": "gold", "team": "a", "contract.gpuctl.test/zone": "east", "priority": "5"},
        "b": {"tier": "silver", "team": "b", "contract.gpuctl.test/zone": "west", "priority": "2"},
        "c": {"tier": "gold", "gpu": "", "priority": "9"},
        "d": {},
    }
    out = []
    for key, labels in marks.items():
        it = instancetype(f"contract-{suffix}-{key}", group_id=f"k{suffix}{key}")
        it.pop("status")
        it["metadata"]["labels"].update({**labels, "contract.gpuctl.test/run": suffix})
        out.append(it)
    return out


@pytest.fixture(scope="module")
def cluster(api: Any, control_plane: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    objs = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    suffix = uuid.uuid4().hex[:5]
    namespaces = (f"contract-{suffix}-x", f"contract-{suffix}-y")
    created: list[tuple[str, str, str | None]] = []
    try:
        for ns in namespaces:
            core.create_namespace({"metadata": {"name": ns}})
        for it in _types(suffix):
            objs.create_cluster_custom_object(WORKER, WV, "instancetypes", it)
            created.append(("instancetypes", it["metadata"]["name"], None))
        # Workloads of the same names in both namespaces, and Instances with floats kubectl prints as Go does.
        for ns, labels in zip(namespaces, ({"team": "a"}, {"team": "b"}), strict=True):
            for name, extra in (("train", {"tier": "gold"}), ("serve", {})):
                objs.create_namespaced_custom_object(
                    KUEUE, KV, ns, "workloads", _workload(name, {**labels, **extra, "contract.gpuctl.test/run": suffix})
                )
                created.append(("workloads", name, ns))
            objs.create_namespaced_custom_object(WORKER, WV, ns, "instances", _instance(f"nb-{suffix}", labels, suffix))
            created.append(("instances", f"nb-{suffix}", ns))
        dump = tmp_path_factory.mktemp("contract") / "dump"
        result = runner.invoke(app, ["dump", str(dump), "--kubeconfig", str(control_plane.kubeconfig)])
        assert result.exit_code == 0, result.stderr
        yield Cluster(str(control_plane.kubeconfig), control_plane.bin_dir / "kubectl", suffix, namespaces, dump)
    finally:
        for kind, name, ns in reversed(created):
            try:
                if ns:
                    group, version = (KUEUE, KV) if kind == "workloads" else (WORKER, WV)
                    objs.delete_namespaced_custom_object(group, version, ns, kind, name)
                else:
                    objs.delete_cluster_custom_object(WORKER, WV, kind, name)
            except client.ApiException:
                pass


def _workload(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{KUEUE}/{KV}",
        "kind": "Workload",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "queueName": "nowhere",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "main", "image": "gpuctl-it/none"}]}},
                }
            ],
        },
    }


def _instance(name: str, labels: dict[str, str], suffix: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{WORKER}/{WV}",
        "kind": "Instance",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "type": f"contract-{suffix}-a",
            "image": "gpuctl-it/none",
            "volume": {"ephemeral": {"capacity": "10Gi"}},
            # numbers written as floats the API server stores as the integers GPUStack's schema types them
            "ports": [{"port": 8080.0, "name": "http"}],
            "resources": {
                "cpu": 4.0,
                "ram": 1600000.0,
                "localStorage": "10Gi",
                "acceleratorSlicedMemoryPercentage": 50,
            },
        },
    }


def _names(text: str) -> list[str]:
    return sorted(text.split())


# ----------------------------------------------------------------------------------------------- selectors

LABEL_SELECTORS = [
    "tier=gold",
    "tier==gold",
    "tier!=gold",
    "tier in (gold,silver)",
    "tier in (gold, silver)",
    "tier notin (gold)",
    "tier",
    "!tier",
    "tier=gold,team=a",
    "contract.gpuctl.test/zone=east",
    "contract.gpuctl.test/zone in (east,west)",
    "!contract.gpuctl.test/zone",
    "gpu=",
    "gpu",
    "team!=a,tier",
    "tier notin (gold),!gpu",
    "nosuch in (a,b),tier",
    "priority>3",
    "priority<3",
    "tier in ()",
    "tier notin ()",
    "tier in (gold,,x)",
    "tier in(silver)",
    "",
]
BAD_LABEL_SELECTORS = [
    "tier=gold=x",
    "tier in gold",
    "tier gold",
    "!",
    "a b=c",
    "-tier=x",
    "tier=(x)",
    "tier in (a b)",
    "tier,",
    ",tier",
    "priority>a",
    "x/y/z",
]
FIELD_SELECTORS = ["metadata.name={a}", "metadata.name!={a}", "metadata.name={a},metadata.name!={b}", "metadata.name=="]
BAD_FIELD_SELECTORS = ["spec.os=linux", "metadata.namespace=x", "status.phase=Active", "metadata.name"]


def _run_scoped(sel: str, suffix: str) -> str:
    """A selector limited to this module's objects (the cluster holds other tests' pools too)."""
    return ",".join(p for p in (f"contract.gpuctl.test/run={suffix}", sel) if p)


@pytest.mark.parametrize("selector", LABEL_SELECTORS)
def test_label_selectors_choose_what_kubectl_chooses(cluster: Cluster, selector: str) -> None:
    scoped = _run_scoped(selector, cluster.suffix)
    code, expected, err = cluster.kubectl("get", "instancetypes", "-l", scoped, "-o", "name")
    assert code == 0, err
    for args in (["views"], ["instancetype", "list"]):
        for snapshot in (False, True):
            code, out, err = cluster.gpuctl(*args, "-l", scoped, "-o", "name", snapshot=snapshot)
            assert code == 0, (args, snapshot, err)
            assert _names(out) == _names(expected), (args, snapshot)
    # Namespaced: Workloads (two namespaces, the same names in each) and Instances.
    code, expected, err = cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-A", "-l", scoped, "-o", "name")
    assert code == 0, err
    for snapshot in (False, True):
        code, out, err = cluster.gpuctl("workloads", "-A", "-l", scoped, "-o", "name", snapshot=snapshot)
        assert code == 0 and _names(out) == _names(expected), (snapshot, err)


def test_the_selectors_are_not_vacuous(cluster: Cluster) -> None:
    counts = {
        sel: len(
            cluster.kubectl("get", "instancetypes", "-l", _run_scoped(sel, cluster.suffix), "-o", "name")[1].split()
        )
        for sel in LABEL_SELECTORS
    }
    assert len(set(counts.values())) >= 4 and counts[""] == 4 and counts["nosuch in (a,b),tier"] == 0, counts


@pytest.mark.parametrize("selector", BAD_LABEL_SELECTORS)
def test_a_selector_kubectl_refuses_is_refused(cluster: Cluster, selector: str) -> None:
    code, _, err = cluster.kubectl("get", "instancetypes", "-l", selector)
    assert code != 0 and err, selector
    for snapshot in (False, True):
        code, out, err = cluster.gpuctl("views", "-l", selector, snapshot=snapshot)
        assert code == 2 and out == "" and err.count("\n") == 1 and "label selector" in err, (snapshot, err)


@pytest.mark.parametrize("template", FIELD_SELECTORS)
def test_field_selectors_choose_what_kubectl_chooses(cluster: Cluster, template: str) -> None:
    selector = template.format(a=f"contract-{cluster.suffix}-a", b=f"contract-{cluster.suffix}-b")
    run_label = f"contract.gpuctl.test/run={cluster.suffix}"
    code, expected, err = cluster.kubectl(
        "get", "instancetypes", "-l", run_label, "--field-selector", selector, "-o", "name"
    )
    assert code == 0, err
    for snapshot in (False, True):
        code, out, err = cluster.gpuctl(
            "views", "-l", run_label, "--field-selector", selector, "-o", "name", snapshot=snapshot
        )
        assert code == 0 and _names(out) == _names(expected), (snapshot, err)
    namespace = cluster.namespaces[1]
    code, expected, _ = cluster.kubectl(
        "get", "workloads.kueue.x-k8s.io", "-A", "--field-selector", f"metadata.namespace={namespace}", "-o", "name"
    )
    for snapshot in (False, True):
        code, out, err = cluster.gpuctl(
            "workloads", "-A", "--field-selector", f"metadata.namespace={namespace}", "-o", "name", snapshot=snapshot
        )
        assert code == 0 and _names(out) == _names(expected) and len(out.split()) == 2, err


@pytest.mark.parametrize("selector", BAD_FIELD_SELECTORS)
def test_a_field_the_server_cannot_select_by_is_refused_as_the_server_refuses_it(
    cluster: Cluster, selector: str
) -> None:
    code, _, err = cluster.kubectl("get", "instancetypes", "--field-selector", selector)
    assert code != 0
    server_words = re.search(r"field label not supported: [\w.]+", err)
    for snapshot in (False, True):
        code, out, mine = cluster.gpuctl("views", "--field-selector", selector, snapshot=snapshot)
        assert code == 2 and out == "" and mine.count("\n") == 1, mine
        if server_words:
            assert server_words[0] in mine, (err, mine)


def test_selectors_on_a_command_that_lists_nothing_are_refused(cluster: Cluster) -> None:
    code, _, err = cluster.gpuctl("explain", "workload", "train", "-n", cluster.namespaces[0], "-l", "tier=gold")
    assert code == 2 and "lists nothing to select" in err and err.count("\n") == 1


def test_bulk_writes_print_what_a_selector_matched(cluster: Cluster) -> None:
    code, out, err = cluster.gpuctl(
        "hold", "-l", _run_scoped("tier=gold", cluster.suffix), "--dry-run", "server", "--yes"
    )
    assert code == 0, err
    matched = f"matched 2 InstanceType(s): contract-{cluster.suffix}-a, contract-{cluster.suffix}-c"
    assert matched in err
    assert out.count("would change") == 2 and "server dry run" in out
    code, out, err = cluster.gpuctl("hold", "-l", _run_scoped("tier=gold", cluster.suffix))
    assert code == 2 and "pass --yes" in err and out == ""


# ----------------------------------------------------------------------------------------------- names


def test_names_round_trip_through_kubectl_and_back(cluster: Cluster) -> None:
    run_label = f"contract.gpuctl.test/run={cluster.suffix}"
    code, names, err = cluster.gpuctl("views", "-l", run_label, "-o", "name")
    assert code == 0 and len(names.split()) == 4, err
    assert all(n.startswith("instancetype.worker.gpustack.ai/") for n in names.split())
    # kubectl reads gpuctl's names ...
    code, out, err = cluster.kubectl("get", *names.split(), "-o", "name")
    assert code == 0 and _names(out) == _names(names), err
    # ... and gpuctl reads kubectl's.
    code, kubectl_names, _ = cluster.kubectl("get", "instancetypes", "-l", run_label, "-o", "name")
    code, out, err = cluster.gpuctl("views", *kubectl_names.split(), "-o", "name")
    assert code == 0 and _names(out) == _names(kubectl_names), err
    for ns in cluster.namespaces:
        code, names, err = cluster.gpuctl("workloads", "-n", ns, "-o", "name")
        assert code == 0 and _names(names) == ["workload.kueue.x-k8s.io/serve", "workload.kueue.x-k8s.io/train"], err
        assert _names(cluster.kubectl("get", *names.split(), "-n", ns, "-o", "name")[1]) == _names(names)
        code, out, err = cluster.gpuctl("explain", "workload", "workload.kueue.x-k8s.io/train", "-n", ns, "-o", "name")
        assert code == 0 and out == "workload.kueue.x-k8s.io/train\n", err
        code, names, err = cluster.gpuctl("instance", "list", "-n", ns, "-o", "name")
        assert code == 0 and names == f"instance.worker.gpustack.ai/nb-{cluster.suffix}\n", err
        assert cluster.kubectl("get", names.strip(), "-n", ns, "-o", "name")[1] == names


def test_views_names_piped_to_hold_through_xargs(cluster: Cluster) -> None:
    gpuctl = Path(sys.executable).with_name("gpuctl")
    script = (
        f"{gpuctl} views -l contract.gpuctl.test/run={cluster.suffix} --kubeconfig {cluster.kubeconfig} -o name"
        f" | xargs {gpuctl} hold --dry-run=server --kubeconfig {cluster.kubeconfig}"
    )
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(re.findall(r"instancetype/(contract-\S+) would change", proc.stdout)) == [
        f"contract-{cluster.suffix}-{k}" for k in "abcd"
    ]


def test_a_name_of_another_kind_is_refused(cluster: Cluster) -> None:
    code, _, err = cluster.gpuctl("hold", "workload.kueue.x-k8s.io/train")
    assert code == 2 and "hold takes InstanceTypes: workload.kueue.x-k8s.io/train names a Workload" in err


# ----------------------------------------------------------------------------------------------- printing


@pytest.mark.parametrize(
    "columns",
    [
        "NAME:.metadata.name,LABELS:.metadata.labels",
        "NAME:metadata.name,TIER:metadata.labels.tier",
        "NAME:{.metadata.name},ZONE:{.metadata.labels.contract\\.gpuctl\\.test/zone}",
    ],
)
def test_metadata_columns_print_what_kubectl_prints(cluster: Cluster, columns: str) -> None:
    args = ("-l", f"contract.gpuctl.test/run={cluster.suffix}", "-o", f"custom-columns={columns}")
    code, expected, err = cluster.kubectl("get", "instancetypes", *args, "--sort-by", ".metadata.name")
    assert code == 0, err
    for command in (["views"], ["instancetype", "list"]):
        code, out, err = cluster.gpuctl(*command, *args, "--sort-by", "metadata.name")
        assert code == 0, err
        assert [line.split() for line in out.splitlines()] == [line.split() for line in expected.splitlines()]


TEMPLATES = [
    '{range .items[*]}{.metadata.name}{"\\t"}{.metadata.labels.tier}{"\\n"}{end}',
    "{.items[*].metadata.labels.contract\\.gpuctl\\.test/zone}",
    "{.items[*]['metadata.name', 'metadata.labels.team']}",
    '{.items[?(@.metadata.labels.tier=="gold")].metadata.name}',
    "{.items[0].spec.unitResources}",
    "{.items[-1:].metadata.labels}",
    "{.items[*].spec.ports[0]}",
    "{range .items[*].spec.resources}{.cpu} {.ram} {.acceleratorSlicedMemoryPercentage}{end}",
    "{.items[1].metadata.name} {.items[0:4:2].kind}",
    "{.items[?(@.metadata.labels.gpu)].metadata.name}",
]


@pytest.mark.parametrize("template", TEMPLATES)
def test_jsonpath_prints_what_kubectl_prints(cluster: Cluster, template: str) -> None:
    run_label = ("-l", f"contract.gpuctl.test/run={cluster.suffix}")
    pairs = [
        (("get", "instancetypes", *run_label), ("instancetype", "list", *run_label)),
        (("get", "instances", "-A"), ("instance", "list", "-A")),
    ]
    for kubectl_args, gpuctl_args in pairs:
        code, expected, err = cluster.kubectl(*kubectl_args, "-o", f"jsonpath={template}")
        code_mine, out, mine = cluster.gpuctl(*gpuctl_args, "-o", f"jsonpath={template}")
        if code != 0:  # kubectl refuses it (an index beyond this list): so does gpuctl, in one line
            assert code_mine == 2 and mine.count("\n") == 1, (err, mine)
        else:
            assert code_mine == 0 and out == expected, (kubectl_args, mine)


def test_numbers_print_as_kubectl_prints_them(cluster: Cluster) -> None:
    template = "{.items[0].spec.resources.cpu} {.items[0].spec.resources}"
    _code, expected, _ = cluster.kubectl("get", "instances", "-A", "-o", f"jsonpath={template}")
    assert expected == '4 {"acceleratorSlicedMemoryPercentage":50,"cpu":4,"localStorage":"10Gi","ram":1600000}'
    assert cluster.gpuctl("instance", "list", "-A", "-o", f"jsonpath={template}")[1] == expected


def test_sort_by_a_path_no_item_has_fails_as_kubectl_fails(cluster: Cluster) -> None:
    theirs, _, err = cluster.kubectl("get", "instancetypes", "--sort-by", ".bogus", "-o", "name")
    assert theirs != 0
    expected = err.strip().removeprefix("error: ")
    for command in (["views"], ["instancetype", "list"], ["workloads", "-A"], ["instance", "list", "-A"]):
        code, out, mine = cluster.gpuctl(*command, "--sort-by", ".bogus")
        assert code == theirs and out == "" and mine.startswith(f"error: {expected}"), (theirs, expected, code, mine)
    for path in ("metadata.name", ".metadata.name", "{.metadata.name}"):
        code, expected, _ = cluster.kubectl(
            "get", "instancetypes", "-l", f"contract.gpuctl.test/run={cluster.suffix}", "--sort-by", path, "-o", "name"
        )
        code, out, err = cluster.gpuctl(
            "views", "-l", f"contract.gpuctl.test/run={cluster.suffix}", "--sort-by", path, "-o", "name"
        )
        assert code == 0 and out == expected, err


# ----------------------------------------------------------------------------------------------- exit codes


def _commands() -> list[str]:
    out = []

    def visit(command: Any, path: str) -> None:
        sub = getattr(command, "commands", None)
        if sub:
            for name, child in sub.items():
                visit(child, f"{path} {name}".strip())
        else:
            out.append(path)

    visit(typer.main.get_command(app), "")
    return sorted(out)


NOT_FOUND = [
    (["views", "nope"], ["get", "instancetype", "nope"]),
    (["partitions", "nope"], ["get", "instancetype", "nope"]),
    (["fragmentation", "nope"], ["get", "instancetype", "nope"]),
    (["top", "nope", "--once"], ["get", "instancetype", "nope"]),
    (["queue", "nope"], ["get", "clusterqueue", "nope"]),
    (["usage", "nope", "-A"], ["get", "instancetype", "nope"]),
    (["plan", "partitions", "nope"], ["get", "instancetype", "nope"]),
    (["plan", "drain", "nope"], ["get", "node", "nope"]),
    (["explain", "workload", "nope", "-n", "default"], ["get", "workload", "nope", "-n", "default"]),
    (["explain", "pod", "nope", "-n", "default"], ["get", "pod", "nope", "-n", "default"]),
    (["explain", "instance", "nope", "-n", "default"], ["get", "instance", "nope", "-n", "default"]),
    (["simulate", "--workload", "default/nope"], ["get", "workload", "nope", "-n", "default"]),
    (["hold", "nope"], ["patch", "instancetype", "nope", "--type", "merge", "-p", '{"spec":{"inactive":true}}']),
    (["drain", "nope"], ["patch", "clusterqueue", "nope", "--type", "merge", "-p", "{}"]),
    (["resume", "nope"], ["patch", "clusterqueue", "nope", "--type", "merge", "-p", "{}"]),
    (["instancetype", "describe", "nope"], ["describe", "instancetype", "nope"]),
    (["instancetype", "rename", "nope", "X"], ["get", "instancetype", "nope"]),
    (["instancetype", "deactivate", "nope"], ["get", "instancetype", "nope"]),
    (["instancetype", "activate", "nope"], ["get", "instancetype", "nope"]),
    (["instancetype", "delete", "nope"], ["delete", "instancetype", "nope"]),
    (["instance", "stop", "nope", "-n", "default"], ["get", "instance", "nope", "-n", "default"]),
    (["instance", "start", "nope", "-n", "default"], ["get", "instance", "nope", "-n", "default"]),
    (
        ["webhook", "dry-run", "pod", "-f", "/nonexistent.yaml"],
        ["apply", "--dry-run=server", "-f", "/nonexistent.yaml"],
    ),
    (["diff", "/nonexistent", "live"], ["get", "-f", "/nonexistent"]),
]


@pytest.mark.parametrize(("mine", "theirs"), NOT_FOUND, ids=lambda a: " ".join(a))
def test_a_missing_object_exits_1_as_kubectl_does(cluster: Cluster, mine: list[str], theirs: list[str]) -> None:
    code, _, err = cluster.kubectl(*theirs)
    assert code == 1 and ("NotFound" in err or "not found" in err or "does not exist" in err), err
    code, _out, err = cluster.gpuctl(*mine)
    assert code == 1 and err.count("\n") == 1, (code, err)
    assert any(words in err.lower() for words in ("not found", "no such file", "does not exist")), err


NAME_NO_OBJECT = {"version", "completion", "dump", "doctor", "rbac admin", "workloads", "instance list"}
NAME_NO_OBJECT |= {"instancetype list", "instancetype create", "instancetype apply"}
"""Commands that take no name of an existing object (they list, create, or read no single object)."""


def test_every_command_that_names_an_object_is_held_to_exit_1() -> None:
    def command_of(words: list[str]) -> str:
        return max((c for c in _commands() if words[: len(c.split())] == c.split()), key=len)

    covered = {command_of(mine) for mine, _ in NOT_FOUND}
    assert covered | NAME_NO_OBJECT == set(_commands()) and not covered & NAME_NO_OBJECT


@pytest.mark.parametrize("command", _commands())
def test_an_unknown_flag_exits_2_in_one_line_pointing_at_the_help(cluster: Cluster, command: str) -> None:
    code, _, theirs = cluster.kubectl("get", "--bogus-flag")
    assert code == 1 and theirs.startswith("error: unknown flag: --bogus-flag")
    code, out, err = cluster.gpuctl(*command.split(), "--bogus-flag")
    assert code == 2 and out == "" and err.count("\n") == 1, (command, err)
    assert err.startswith("error: unknown flag: --bogus-flag") and err.rstrip().endswith(f"see 'gpuctl {command} -h'")


def test_a_missing_argument_exits_2_in_one_line(cluster: Cluster) -> None:
    for command in ("explain workload", "instancetype rename", "webhook dry-run", "diff"):
        code, out, err = cluster.gpuctl(*command.split())
        assert code == 2 and out == "" and err.count("\n") == 1 and f"see 'gpuctl {command} -h'" in err, err


def test_bare_gpuctl_prints_its_help_and_exits_0() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from gpuctl.cli.startup import run; run()"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: gpuctl") and proc.stderr == ""

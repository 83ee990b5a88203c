"""The CLI as kubectl users expect it, on the bundled snapshot: tables that hide nothing at a terminal of any width,
kubectl's output formats on every list command, flags before or after the subcommand, name completion, help with
examples, and the plugin's own usage and completion."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuctl.cli.jsonpath import value_at
from gpuctl.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = str(ROOT / "examples" / "snapshot")
runner = CliRunner()
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def on_terminal(args: list[str], columns: int, *, raw: bool = False, env: dict[str, str] | None = None) -> str:
    """The command's output on a pseudo-terminal ``columns`` wide (as a person at a terminal sees it); ``raw`` keeps
    the escape codes."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environment = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    environment.pop("NO_COLOR", None)
    environment.update(env or {})
    proc = subprocess.Popen(
        [sys.executable, "-c", "from gpuctl.cli.startup import run; run()", *args],
        stdout=follower,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        env=environment,
        cwd=ROOT,
    )
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 20)
        if not ready:
            proc.kill()
            raise AssertionError(f"no output from {args}")
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(20)
    os.close(leader)
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    return text if raw else ANSI.sub("", text)


# Every table, with the JSON fields whose every value must appear whole in it.
TABLES: list[tuple[list[str], list[str]]] = [
    (["views", "-o", "wide"], [".name", ".entrance", ".phase"]),
    (["views", "--by-node", "-o", "wide"], [".instanceType", ".node"]),
    (["views", "--by-card", "-o", "wide"], [".instanceType", ".node", ".card", ".family", ".mode"]),
    (["partitions", "-o", "wide"], [".instanceType", ".profile", ".state"]),
    (["partitions", "--by-node"], [".instanceType", ".node", ".profile"]),
    (["partitions", "--by-card", "-o", "wide"], [".instanceType", ".node", ".card"]),
    (["workloads", "-A", "-o", "wide"], [".namespace", ".name", ".queue", ".clusterQueue"]),
    (["instancetype", "list", "-o", "wide"], [".metadata.name", ".status.entrance"]),
]


def json_items(args: list[str]) -> list[dict[str, Any]]:
    table_args = [a for a in args if a not in ("-o", "wide")]
    code, out, err = run(*table_args, "--snapshot", SNAPSHOT, "-o", "json")
    assert code == 0, err
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize(("args", "fields"), TABLES, ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_tables_at_a_terminal_hide_no_value(args: list[str], fields: list[str], columns: int) -> None:
    text = on_terminal([*args, "--snapshot", SNAPSHOT], columns)
    items = json_items(args)
    assert items, args
    for item in items:
        for field in fields:
            value = value_at(field, item)
            if value:
                assert str(value) in text, f"{field}={value!r} missing or cut at {columns} columns:\n{text}"


def test_held_work_is_coloured_and_no_color_turns_it_off() -> None:
    text_raw = on_terminal(["workloads", "-A", "--snapshot", SNAPSHOT], 200)
    assert "HELD-BY" in text_raw
    code, out, _ = run("workloads", "-A", "--snapshot", SNAPSHOT, env={"NO_COLOR": "1"})
    assert code == 0 and "\x1b[" not in out


# ----------------------------------------------------------------------------------------------- output formats

LISTS = [
    ["views"],
    ["partitions"],
    ["workloads", "-A"],
    ["instance", "list", "-A"],
    ["instancetype", "list"],
]


@pytest.mark.parametrize("args", LISTS, ids=" ".join)
def test_every_list_is_a_kubernetes_list_with_jsonpath_custom_columns_and_sort(args: list[str]) -> None:
    code, out, err = run(*args, "--snapshot", SNAPSHOT, "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["kind"].endswith("List") and data["apiVersion"] and isinstance(data["items"], list)
    code, out, err = run(*args, "--snapshot", SNAPSHOT, "-o", "jsonpath={.kind} {.items[*].nonexistent}")
    assert code == 0 and out.startswith(data["kind"]), err
    code, out, err = run(*args, "--snapshot", SNAPSHOT, "-o", "custom-columns=KIND:.kind", "--no-headers")
    assert code == 0, err
    assert len([line for line in out.splitlines() if line.strip()]) == len(data["items"])
    code, out, err = run(*args, "--snapshot", SNAPSHOT, "--sort-by", "metadata.name", "-o", "name")
    assert code == 0 and len(out.splitlines()) == len({i["metadata"]["name"] for i in data["items"]}), err
    code, out, err = run(*args, "--snapshot", SNAPSHOT, "--sort-by", ".nonexistent", "-o", "name")
    if data["items"]:  # as kubectl: a path no item has is an error, exit 1 (an empty list has nothing to sort)
        assert code == 1 and out == "", err
        assert err.startswith('error: couldn\'t find any field with path "{.nonexistent}" in the list of objects')
    else:
        assert code == 0, err


def test_sort_by_orders_the_items() -> None:
    out = run("views", "--snapshot", SNAPSHOT, "--sort-by", ".acceleratorSliced.remaining", "-o", "name")[1]
    names = out.split()
    data = run("views", "--snapshot", SNAPSHOT, "-o", "json")[1]
    by_value = sorted(json.loads(data)["items"], key=lambda i: i["acceleratorSliced"]["remaining"])
    assert names == [f"instancetype.worker.gpustack.ai/{i['name']}" for i in by_value]
    relaxed = run("views", "--snapshot", SNAPSHOT, "--sort-by", "acceleratorSliced.remaining", "-o", "name")[1]
    assert relaxed.split() == names


def test_jsonpath_range_and_files(tmp_path: Path) -> None:
    template = '{range .items[*]}{.name}{"\\t"}{.accelerator.remaining}{"\\n"}{end}'
    code, out, _ = run("views", "--snapshot", SNAPSHOT, "-o", f"jsonpath={template}")
    assert code == 0 and "gpustack--nvidia-a10g-linux-amd64\t4" in out.splitlines()
    (tmp_path / "t.jsonpath").write_text(template)
    assert run("views", "--snapshot", SNAPSHOT, "-o", f"jsonpath-file={tmp_path / 't.jsonpath'}")[1] == out
    (tmp_path / "cols").write_text("NAME FREE\n.name .accelerator.remaining\n")
    code, out, _ = run("views", "--snapshot", SNAPSHOT, "-o", f"custom-columns-file={tmp_path / 'cols'}")
    assert code == 0 and out.splitlines()[0].split() == ["NAME", "FREE"]


def test_bad_output_flags_are_usage_errors() -> None:
    code, _, err = run("views", "--snapshot", SNAPSHOT, "-o", "xml")
    assert code == 2 and "unknown output format" in err and "jsonpath=" in err
    code, _, err = run("views", "--snapshot", SNAPSHOT, "-o", "jsonpath={.items[")
    assert code == 2 and "jsonpath" in err
    code, _, err = run("views", "--snapshot", SNAPSHOT, "-o", "custom-columns=NAME")
    assert code == 2 and "HEADER:.json.path" in err


def test_durations_read_as_kubectl_reads_them() -> None:
    from gpuctl.cli.source import parse_duration, parse_timeout

    assert [parse_duration(t, "--timeout") for t in ("90", "90s", "1.5m", "1h", "250ms")] == [90, 90, 90, 3600, 0.25]
    assert parse_timeout("0") is None and parse_timeout("2s") == 2
    for bad in ("ten", "-5s", "nan"):
        code, _, err = run("drain", "some-pool", "--wait", "--timeout", bad, "--kubeconfig", "/nonexistent")
        assert code == 2 and err.startswith(f"error: --timeout {bad!r}") and err.count("\n") == 1, err
    code, _, err = run("instancetype", "delete", "t", "--wait", "--timeout", "500ms", "--kubeconfig", "/nonexistent")
    assert code == 2 and "wait at least 1s" in err, err


def test_show_labels_adds_the_objects_labels() -> None:
    code, out, _ = run("views", "--snapshot", SNAPSHOT, "--show-labels")
    assert code == 0 and out.splitlines()[0].split()[-1] == "LABELS"
    assert "schedule.gpustack.ai/queue-entrance=" in out


# ----------------------------------------------------------------------------------------------- flags


def test_flags_before_or_after_the_subcommand() -> None:
    after = run("workloads", "-n", "team-a", "--snapshot", SNAPSHOT, "-o", "name")
    before = run("--snapshot", SNAPSHOT, "-n", "team-a", "workloads", "-o", "name")
    assert after == before and after[0] == 0 and after[1]
    # A flag repeated after the subcommand wins.
    assert run("-n", "nowhere", "workloads", "-n", "team-a", "--snapshot", SNAPSHOT, "-o", "name") == after


def test_workloads_filter_by_pool_and_namespace() -> None:
    code, out, _ = run(
        "workloads", "-t", "gpustack--nvidia-a10g-linux-amd64", "-n", "team-a", "--snapshot", SNAPSHOT, "-o", "json"
    )
    items = json.loads(out)["items"]
    assert code == 0 and items and all(i["namespace"] == "team-a" for i in items)
    assert all(i["clusterQueue"] in ("gpustack--nvidia-a10g-linux-amd64", "") for i in items)
    code, _, err = run("workloads", "-t", "gpustack--nvidia-a10g-linux-amd64", "-n", "empty", "--snapshot", SNAPSHOT)
    assert code == 0 and err == "No workloads found in namespace empty for pool gpustack--nvidia-a10g-linux-amd64.\n"


def test_the_context_namespace_is_the_default(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "a",
                "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}],
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {}}],
            }
        )
    )
    from gpuctl.cli.source import SourceSpec

    assert SourceSpec(kubeconfig=str(kubeconfig)).resolved_namespace() == "team-a"
    assert SourceSpec(kubeconfig=str(kubeconfig), namespace="x").resolved_namespace() == "x"
    code, _, err = run("workloads", "--kubeconfig", str(kubeconfig), "--context", "b")
    assert code == 1 and err == f'error: context "b" not found in {kubeconfig}; contexts: a\n'


def test_an_unreachable_server_is_one_line_with_host_port_and_cause(tmp_path: Path) -> None:
    code, _, err = run("views", "-s", "https://127.0.0.1:1", "--token", "t", "--request-timeout", "2s")
    assert code == 1 and err.count("\n") == 1
    assert "https://127.0.0.1:1" in err and "connection refused" in err


# ----------------------------------------------------------------------------------------------- completion and help


def complete(words: str, *, plugin: bool = False) -> list[str]:
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    env["_KUBECTL_GPUCTL_COMPLETE" if plugin else "_GPUCTL_COMPLETE"] = "complete_bash"
    proc = subprocess.run(
        [sys.executable, "-c", "from gpuctl.cli.startup import run; run()"],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=20,
    )
    return proc.stdout.split()


def test_names_complete_from_the_snapshot() -> None:
    assert complete(f"gpuctl views --snapshot {SNAPSHOT} gpustack--nvidia") == [
        "gpustack--nvidia-a10g-linux-amd64",
        "gpustack--nvidia-h100-80gb-hbm3-linux-amd64",
    ]
    assert complete(f"gpuctl explain workload --snapshot {SNAPSHOT} team-a/tr") == ["team-a/train-big"]
    assert complete(f"gpuctl explain workload --snapshot {SNAPSHOT} -n team-a ch") == ["chat"]
    assert "gpustack--nvidia-a10g-linux-amd64" in complete(f"gpuctl drain --snapshot {SNAPSHOT} gpu", plugin=True)


def test_contexts_complete_from_the_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncontexts:\n- {name: prod, context: {cluster: c}}\n- {name: staging, context: {cluster: c}}\n"
        "clusters:\n- {name: c, cluster: {server: https://x}}\n"
    )
    assert complete(f"gpuctl views --kubeconfig {kubeconfig} --context pr") == ["prod"]


def test_the_pip_installed_completion_entry_point_needs_no_gpuctl_on_path(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from gpuctl.cli.startup import plugin_complete; plugin_complete()",
            "__complete",
            "views",
            "--snapshot",
            SNAPSHOT,
            "gpustack--g",
        ],
        env={"PATH": str(tmp_path), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=20,
    )
    assert proc.stdout.split() == ["gpustack--generic-linux-amd64", ":4"], proc.stderr


def test_as_the_plugin_usage_reads_kubectl_gpuctl() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv[0] = 'kubectl-gpuctl'; from gpuctl.cli.startup import run; run()",
            "views",
            "--help",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=20,
    )
    assert proc.stdout.startswith("Usage: kubectl gpuctl views")


def _commands(group: Any, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for name, command in sorted(getattr(group, "commands", {}).items()):
        path = f"{prefix}{name}"
        out.append((path, command))
        out += _commands(command, f"{path} ")
    return out


def test_every_command_has_a_whole_summary_and_examples() -> None:
    import typer.main

    group = typer.main.get_command(app)
    for path, command in _commands(group):
        summary = command.get_short_help_str(limit=200)
        assert summary.endswith(".") and not summary.endswith("..."), (path, summary)
        code, out, _ = run(*path.split(), "--help")
        assert code == 0 and "Examples:" in out and "gpuctl " in out.split("Examples:")[1], path


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        # A typing error is refused, not scored (a profile no pool offers and no card model has).
        (["fragmentation", "--shape", "pt=nope"], 2, "--shape pt=nope: no pool offers that profile"),
        # As kubectl: a filter naming nothing is an error, not an empty list.
        (["workloads", "-A", "--instancetype", "nosuch"], 1, 'instancetype "nosuch" not found'),
        # An empty subject binds nobody.
        (["rbac", "admin", "--bind-group", ""], 2, "--bind-group '': an empty name binds nobody"),
        (["rbac", "admin", "--bind-user", " "], 2, "--bind-user '': an empty name binds nobody"),
    ],
)
def test_input_that_names_nothing_is_refused_in_one_line(args: list[str], code: int, said: str) -> None:
    got, out, err = run(*args, "--snapshot", SNAPSHOT)
    assert got == code and out == "" and said in err and len(err.strip().splitlines()) == 1, (got, out, err)


def test_a_flag_given_to_a_group_points_at_its_commands() -> None:
    code, out, err = run("plan", "--snapshot", SNAPSHOT)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "gpuctl plan takes a command before its flags (drain, partitions)" in err and "unknown flag" not in err
    code, _, err = run("views", "--snapshott", SNAPSHOT)
    assert code == 2 and "unknown flag: --snapshott (did you mean --snapshot?)" in err


@pytest.mark.parametrize(
    "args",
    [
        ["views", "--snapshot", "{bad}"],
        ["simulate", "-f", "{bad}", "--snapshot", SNAPSHOT],
        ["webhook", "dry-run", "pod", "-f", "{bad}", "--snapshot", SNAPSHOT],
        ["views", "--kubeconfig", "{bad}"],
        ["views", "--snapshot", SNAPSHOT, "-o", "custom-columns-file={bad}"],
    ],
)
def test_a_file_that_is_not_utf8_is_named_without_python_internals(args: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe\x00bad")
    code, out, err = run(*[a.replace("{bad}", str(bad)) for a in args])
    assert code in (1, 2) and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert "not UTF-8 text (byte 0xff at offset 0)" in err and "codec" not in err and "Traceback" not in err, err

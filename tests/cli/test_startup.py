"""The start-up table answers exactly as the app would: help at full width, bare groups, version, and the completion
of command names and flags; whatever it cannot answer exactly goes to the app."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuctl.cli.shells import COMPLETE_VAR
from gpuctl.cli.startup import quick_answer
from gpuctl.cli.startup_table import TABLE

TREE: dict[str, Any] = TABLE["tree"]


def app_completion(words: str, cword: int) -> str:
    from gpuctl.cli.main import app
    from gpuctl.cli.vendored import completion_init

    completion_init()
    env = {"COMP_WORDS": words, "COMP_CWORD": str(cword), COMPLETE_VAR: "complete_bash"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            app([], prog_name="gpuctl", complete_var=COMPLETE_VAR)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return out.getvalue()


def case(*words: str, must: bool) -> tuple[str, int, bool]:
    """COMP_WORDS and COMP_CWORD as bash sets them, the last word being the one completed ("" after a space), and
    whether the table must answer it itself (flags and command names; names and values are the app's)."""
    return " ".join(words), len(words) - 1, must


def completion_cases() -> list[tuple[str, int, bool]]:
    cases = []
    for path, node in TREE.items():
        head = ["gpuctl", *path.split()]
        group = bool(node["commands"])
        for prefix in ["", "-", "--", "--s", "--no", "-o", "--by", *(c[:2] for c in node["commands"])]:
            cases.append(case(*head, prefix, must=prefix.startswith("-") or group))
        # Flags already given, before and after the subcommand, with and without their values.
        for option in [o for o in node["options"] if not o["multiple"]][:4]:
            value = ["value"] if option["takes_value"] else []
            cases.append(case(*head, option["names"][0], *value, "--", must=not option["eager"]))
            cases.append(case(*head, option["names"][-1], *value, "", must=group and not option["eager"]))
        cases.append(case("gpuctl", "--context", "c", *path.split(), "-", must=True))
        cases.append(case("gpuctl", "-n=x", *path.split(), "--n", must=True))
    return cases


@pytest.mark.parametrize(("words", "cword", "must"), completion_cases())
def test_completion_from_the_table_is_the_apps(words: str, cword: int, must: bool) -> None:
    env = {"COMP_WORDS": words, "COMP_CWORD": str(cword), COMPLETE_VAR: "complete_bash"}
    fast = quick_answer([], "gpuctl", env, 80)
    assert fast is not None or not must, f"the table leaves {words!r} to the app"
    if fast is not None:
        stream, text, code = fast
        assert (stream, code) == ("out", 0)
        assert in_order(text) == in_order(app_completion(words, cword)), words


def in_order(text: str) -> tuple[list[str], set[str]]:
    """The candidates in order, but the help flags as a set: click orders those by a set (a per-process hash order)."""
    lines = text.splitlines()
    return [w for w in lines if w not in ("-h", "--help")], {w for w in lines if w in ("-h", "--help")}


def test_what_the_table_leaves_to_the_app() -> None:
    assert quick_answer(["views", "--help"], "gpuctl", {}, 79) is None  # narrower than the help
    assert quick_answer(["views", "--snapshot", "x", "--help"], "gpuctl", {}, 80) is None
    assert quick_answer(["views"], "gpuctl", {}, 80) is None
    for words, cword in (("gpuctl views --context ", 3), ("gpuctl explain workload ", 3), ("gpuctl 'views' -", 2)):
        env = {"COMP_WORDS": words, "COMP_CWORD": str(cword), COMPLETE_VAR: "complete_bash"}
        assert quick_answer([], "gpuctl", env, 80) is None, words
    assert quick_answer([], "gpuctl", {COMPLETE_VAR: "complete_zsh"}, 80) is None


def run_process(module: str, args: list[str], argv0: str = "gpuctl") -> tuple[str, str, int]:
    code = f"import sys; sys.argv[0] = {argv0!r}; from {module} import run; run()"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=60)
    return result.stdout, result.stderr, result.returncode


@pytest.mark.parametrize(
    ("args", "argv0"),
    [
        (["--help"], "gpuctl"),
        (["views", "-h"], "gpuctl"),
        (["instance", "stop", "--help"], "kubectl-gpuctl"),
        ([], "gpuctl"),
        (["webhook"], "kubectl-gpuctl"),
        (["version"], "gpuctl"),
        (["--version"], "gpuctl"),
    ],
)
def test_a_process_prints_what_the_app_prints(args: list[str], argv0: str) -> None:
    fast = run_process("gpuctl.cli.startup", args, argv0)
    assert fast == run_process("gpuctl.cli.main", args, argv0)
    env = {"COLUMNS": "80"}
    assert quick_answer(args, "kubectl gpuctl" if argv0 == "kubectl-gpuctl" else "gpuctl", env, 80) is not None


def test_start_up_imports_neither_typer_nor_typing() -> None:
    code = (
        "import sys; sys.argv = ['gpuctl', 'views', '--help']\n"
        "from gpuctl.cli import startup\n"
        "try:\n    startup.run()\nexcept SystemExit:\n    pass\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'typing', 'rich', 'kubernetes', 'yaml'))\n"
        "sys.stderr.write(repr(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.startswith("Usage: gpuctl views") and result.stderr == "[]", result.stderr


# ----------------------------------------------------------------------------------------------- names


ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "snapshot"


def names_env(words: str, cword: int, **extra: str) -> dict[str, str]:
    return {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(cword), COMPLETE_VAR: "complete_bash", **extra}


def name_cases(snapshot: Path) -> list[tuple[str, int]]:
    words = [
        f"gpuctl views --snapshot {snapshot} ",
        f"gpuctl views --snapshot {snapshot} gpustack--nvidia",
        f"gpuctl views gpustack--generic-linux-amd64 --snapshot={snapshot} gpu",
        f"gpuctl --snapshot {snapshot} explain workload team-a/",
        f"gpuctl explain workload --snapshot {snapshot} -n team-a ",
        f"gpuctl explain workload -n team-b --snapshot {snapshot} ",
        f"gpuctl explain pod --snapshot {snapshot} ",
        f"gpuctl explain instance --snapshot {snapshot} ",
        f"gpuctl workloads --snapshot {snapshot} -t gpustack--nv",
        f"gpuctl workloads --snapshot {snapshot} -t ",
        f"gpuctl views --snapshot {snapshot} -n ",
        "gpuctl views -o ",
        f"gpuctl instancetype rename --snapshot {snapshot} ",
        f"gpuctl instancetype rename --snapshot {snapshot} gpustack--generic-linux-amd64 ",
    ]
    return [(w, len(w.split()) - (0 if w.endswith(" ") else 1)) for w in words]


@pytest.mark.parametrize("index", range(len(name_cases(EXAMPLE))))
def test_names_from_the_cache_are_the_apps(index: int) -> None:
    """The app's completion remembers what it read; the table then answers the same from the cache."""
    words, cword = name_cases(EXAMPLE)[index]
    env = names_env(words, cword)
    first = quick_answer([], "gpuctl", env, 80)
    app = app_completion(words, cword)  # reads the snapshot, and remembers the names
    fast = quick_answer([], "gpuctl", env, 80)
    if words.endswith("rename --snapshot " + str(EXAMPLE) + " gpustack--generic-linux-amd64 "):
        assert fast is None  # NEW takes no names: the app's call
        return
    assert fast is not None, words
    assert in_order(fast[1]) == in_order(app), words
    assert first is None or "-o" in words  # nothing held before the app read them (a fixed list needs nothing)


def test_a_snapshot_whose_files_change_is_read_again(tmp_path: Path) -> None:
    import shutil

    snapshot = tmp_path / "snap"
    shutil.copytree(EXAMPLE, snapshot)
    words = f"gpuctl views --snapshot {snapshot} "
    env = names_env(words, 4)
    app_completion(words, 4)
    held = quick_answer([], "gpuctl", env, 80)
    assert held is not None and "gpustack--generic-linux-amd64" in held[1]
    types = snapshot / "instancetypes.yaml"
    types.write_text(types.read_text().replace("gpustack--generic-linux-amd64", "gpustack--renamed-linux-amd64"))
    assert quick_answer([], "gpuctl", env, 80) is None
    assert "gpustack--renamed-linux-amd64" in app_completion(words, 4)
    again = quick_answer([], "gpuctl", env, 80)
    assert again is not None and "gpustack--renamed-linux-amd64" in again[1]
    (snapshot / "extra.json").write_text("[]")  # a file added is a change too
    assert quick_answer([], "gpuctl", env, 80) is None


def test_names_are_held_per_namespace_and_kind() -> None:
    base = f"gpuctl explain workload --snapshot {EXAMPLE} "
    app_completion(base + "-n team-a ", 7)
    assert quick_answer([], "gpuctl", names_env(base + "-n team-a ", 7), 80) is not None
    assert quick_answer([], "gpuctl", names_env(base + "-n team-b ", 7), 80) is None
    assert quick_answer([], "gpuctl", names_env(base + "", 5), 80) is None
    pods = f"gpuctl explain pod --snapshot {EXAMPLE} -n team-a "
    assert quick_answer([], "gpuctl", names_env(pods, 7), 80) is None


def test_a_clusters_names_are_held_per_connection_without_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuctl.cli import namecache

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    env = {"HOME": str(tmp_path), "GPUCTL_CACHE_DIR": str(tmp_path / "cache")}
    values = {"kubeconfig": str(kubeconfig), "context": "prod", "token": "s3cr3t-token", "namespace": "team-a"}
    ident, exact = namecache.identity("workload", values, env) or ("", True)
    assert not exact
    namecache.write(ident, ["train", "chat"], env)
    [entry] = (tmp_path / "cache").iterdir()
    assert "s3cr3t-token" not in entry.read_text() and entry.stat().st_mode & 0o077 == 0
    assert (tmp_path / "cache").stat().st_mode & 0o077 == 0
    found = namecache.read(ident, env)
    assert found is not None and found[0] == ["train", "chat"]
    for other in ({"context": "staging"}, {"token": "other"}, {"namespace": "team-b"}, {"server": "https://x"}):
        changed = namecache.identity("workload", {**values, **other}, env)
        assert changed is not None and namecache.read(changed[0], env) is None, other
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: prod\n")  # `kubectl config use-context`
    assert namecache.read((namecache.identity("workload", values, env) or ("", True))[0], env) is None


def test_a_clusters_names_age(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh names answer as they are; older ones answer and are read again in the background (once, however many
    TABs follow); names older than MAX_AGE, or asked for by the refresh itself, go to the app."""
    import time

    from gpuctl.cli import namecache

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    words = f"gpuctl explain workload --kubeconfig {kubeconfig} -n team-a tr"
    env = {**names_env(words, 7), "HOME": str(tmp_path)}
    ident, _ = namecache.identity("workload", {"kubeconfig": str(kubeconfig), "namespace": "team-a"}, env) or ("", 0)
    started: list[dict[str, str]] = []
    monkeypatch.setattr(namecache, "refresh_in_background", lambda e: started.append(dict(e)))
    namecache.write(ident, ["chat", "train", "train-big"], env)
    assert quick_answer([], "gpuctl", env, 80) == ("out", "train\ntrain-big\n", 0) and not started
    namecache.write(ident, ["chat", "train"], env, written=time.time() - namecache.FRESH - 1)
    assert quick_answer([], "gpuctl", env, 80) == ("out", "train\n", 0)
    assert quick_answer([], "gpuctl", env, 80) == ("out", "train\n", 0)
    assert len(started) == 1 and started[0]["COMP_WORDS"] == words
    namecache.write(ident, ["train"], env, written=time.time() - namecache.MAX_AGE - 1)
    assert quick_answer([], "gpuctl", env, 80) is None
    namecache.write(ident, ["train"], env)
    assert quick_answer([], "gpuctl", {**env, namecache.REFRESH_VAR: "1"}, 80) is None

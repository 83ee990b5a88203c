"""Each command declares itself in its own module: the root finds ``gpuctl NAME`` in ``gpuctl.cli.commands.NAME``,
imports only that module to run it, and a new module is a new command."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

from gpuctl.cli import commands, registry

ROOT = Path(__file__).resolve().parents[2]


def test_every_command_module_declares_the_command_named_after_it() -> None:
    before = set(registry.DECLARED)
    for info in pkgutil.iter_modules(commands.__path__):
        importlib.import_module(f"{commands.__name__}.{info.name}")
        assert info.name.replace("_", "-") in registry.DECLARED, info.name
    declared = {d.name.replace("-", "_") for d in registry.every()}
    assert declared == {info.name for info in pkgutil.iter_modules(commands.__path__)}
    assert before <= set(registry.DECLARED)


def test_the_command_list_follows_the_declared_places() -> None:
    listed = [d.listed for d in registry.every()]
    assert listed == sorted(listed)
    assert len(set(listed)) == len(listed)  # no two commands claim one place


def run(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_running_a_command_imports_its_module_alone() -> None:
    out = run(
        """
        import contextlib, io, json, sys
        from gpuctl.cli.main import app
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            app(["views", "--snapshot", "examples/snapshot"], prog_name="gpuctl")
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("gpuctl.cli.commands."))))
        """
    )
    assert json.loads(out) == ["gpuctl.cli.commands.views"]


def test_a_new_module_is_a_new_command(tmp_path: Path) -> None:
    (tmp_path / "hello_there.py").write_text(
        textwrap.dedent(
            '''
            import typer

            from gpuctl.cli.registry import SourceFlags, command
            from gpuctl.cli.source import SourceSpec


            @command("hello-there", summary="Say hello.", examples="\\n  gpuctl hello-there", listed=5, source=SourceFlags())
            def hello_command(*, source: SourceSpec) -> None:
                """Say hello, from a snapshot or a cluster."""
                typer.echo(f"hello from {source.snapshot}")
            '''
        )
    )
    out = run(
        f"""
        import contextlib, io
        from gpuctl.cli import commands
        from gpuctl.cli.main import app
        commands.__path__.append({str(tmp_path)!r})
        for args in (["hello-there", "--snapshot", "somewhere"], ["--help"], ["hello-there", "--help"]):
            with contextlib.suppress(SystemExit):
                app(args, prog_name="gpuctl")
        """
    )
    assert out.startswith("hello from somewhere\n")
    assert "  version        Print the version.\n  hello-there    Say hello.\n  views" in out
    assert "Usage: gpuctl hello-there [OPTIONS]" in out and "Examples:\n    gpuctl hello-there" in out

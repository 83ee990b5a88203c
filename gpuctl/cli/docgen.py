"""Generate the files shipped beside the code from the commands' declarations: man pages, shell completions and the
start-up table.

    python -m gpuctl.cli.docgen [ROOT]

A test regenerates them into a temporary directory and fails when the committed ones are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

import typer

from gpuctl import __version__
from gpuctl.cli import registry

MAN_DATE = "2026-11"

EXIT_STATUS: Final = """0   success.
1   the command could not do its work: the API server unreachable, a file unreadable, a conflict not resolved.
2   usage: flags or arguments that do not fit together.
3   the answer is no where a script needs it: a denied dry-run, a held workload with --exit-code."""

ENVIRONMENT: Final = """GPUCTL_CACHE_DIR
    Where shell completion keeps the names it read between TABs (default $XDG_CACHE_HOME/gpuctl/names, else
    ~/.cache/gpuctl/names).
GPUCTL_SNAPSHOT
    Read objects from this snapshot (a file or a directory) instead of a cluster, as --snapshot does.
GPUCTL_SNAPSHOT_MAX_BYTES
    The largest snapshot file read (default 512 MiB).
KUBECONFIG
    The kubeconfig file(s), colon-separated, when --kubeconfig is not given (default ~/.kube/config).
NO_COLOR
    Print tables without bold headers or colour."""


def _roff(text: str) -> str:
    out = text.replace("\\", "\\\\").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line.startswith((".", "'")) else line for line in out.splitlines())


def _options(command: Any) -> list[str]:
    lines: list[str] = []
    for p in command.params:
        if getattr(p, "hidden", False):
            continue
        if p.param_type_name == "argument":
            continue
        names = ", ".join(f"\\fB{_roff(o)}\\fR" for o in [*p.opts, *p.secondary_opts])
        metavar = (
            ""
            if p.is_flag
            else f" \\fI{_roff(p.make_metavar(_context(command)) if _needs_ctx(p) else p.make_metavar())}\\fR"
        )
        lines += [".TP", names + metavar, _roff(p.help or "")]
    return lines


def _needs_ctx(param: Any) -> bool:
    import inspect

    return "ctx" in inspect.signature(param.make_metavar).parameters


def _context(command: Any) -> Any:
    return typer.Context(command, info_name=command.name)


def _usage(command: Any, path: str) -> str:
    ctx = _context(command)
    pieces = command.collect_usage_pieces(ctx)
    return f"{path} {' '.join(pieces)}".strip()


def man_page(command: Any, path: str, title: str) -> str:
    """One roff page for a command or a group of commands."""
    help_text = (command.help or "").strip()
    first = help_text.split("\n")[0]
    lines = [
        f'.TH "{title.upper()}" "1" "{MAN_DATE}" "gpuctl {__version__}" "gpuctl manual"',
        ".SH NAME",
        f"{_roff(path)} \\- {_roff(first.strip())}",
        ".SH SYNOPSIS",
        f"\\fB{_roff(_usage(command, path))}\\fR",
        ".SH DESCRIPTION",
        _roff(help_text),
    ]
    subcommands = getattr(command, "commands", None)
    if subcommands:
        lines.append(".SH COMMANDS")
        for name in sorted(subcommands):
            sub = subcommands[name]
            lines += [".TP", f"\\fB{_roff(path)} {_roff(name)}\\fR", _roff((sub.help or "").strip().split("\n")[0])]
            opts = _options(sub)
            if opts and not getattr(sub, "commands", None):
                lines.append(".RS")
                lines += opts
                sub_examples = registry.examples(f"{path.removeprefix('gpuctl').strip()} {name}".strip())
                if sub_examples:
                    lines += [".PP", "Examples:", ".nf", _roff(sub_examples.strip("\n")), ".fi"]
                lines.append(".RE")
    opts = _options(command)
    if opts:
        lines += [".SH OPTIONS", *opts]
    examples = registry.examples(path.removeprefix("gpuctl").strip())
    if examples:
        lines += [".SH EXAMPLES", ".nf", _roff(examples.strip("\n")), ".fi"]
    lines += [".SH EXIT STATUS", ".nf", _roff(EXIT_STATUS), ".fi"]
    lines += [".SH ENVIRONMENT", ".nf", _roff(ENVIRONMENT), ".fi"]
    lines += [".SH SEE ALSO", "\\fBgpuctl\\fR(1), \\fBkubectl\\fR(1)"]
    return "\n".join(lines) + "\n"


def _run_app(args: list[str], prog: str) -> tuple[str, str, int]:
    """The app's own answer, in this process, as a run at a terminal of the help's full width would print it (click's
    test runner forces another width, so it is not used here)."""
    import contextlib
    import io
    import os

    from gpuctl.cli.main import app
    from gpuctl.cli.startup import HELP_WIDTH

    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_WIDTH)
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            app(args, prog_name=prog)
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return out.getvalue(), err.getvalue(), code


PROGS = ("gpuctl", "kubectl gpuctl")
"""The names usage reads (``gpuctl``, and the kubectl plugin as its users type it)."""


def startup_table() -> dict[str, Any]:
    """What ``gpuctl.cli.startup`` answers without the app: every command's help and bare-group answer as the app
    prints them at the help's full width, each text once with ``{prog}`` where usage names the program, and the
    text itself under ``*_as`` for a program name whose usage line wraps otherwise; and the tree of command names
    and flags."""
    from gpuctl.cli.main import app
    from gpuctl.cli.startup import PROG, as_printed
    from gpuctl.cli.vendored import get_command

    tree: dict[str, Any] = {}
    completes = _completion_probe()
    texts: dict[str, dict[str, Any]] = {"help": {}, "bare": {}}
    exceptions: dict[str, dict[str, dict[str, Any]]] = {"help_as": {}, "bare_as": {}}

    def once(kind: str, path: str, answer: Any, per_prog: dict[str, Any]) -> None:
        texts[kind][path] = answer
        for prog, actual in per_prog.items():
            if as_printed(answer, prog) != actual:
                exceptions[f"{kind}_as"].setdefault(prog, {})[path] = actual

    def visit(command: Any, path: str, parent: Any) -> None:
        ctx = typer.Context(command, info_name=command.name, parent=parent, **(command.context_settings or {}))
        subcommands = getattr(command, "list_commands", None)
        names = [n for n in subcommands(ctx) if not command.commands[n].hidden] if subcommands else []
        options = [
            {
                # click orders the help flags by a set (per-process hash order): write them as its help shows them.
                "names": sorted(p.opts, key=len) if p.name == "help" else [*p.opts, *p.secondary_opts],
                "takes_value": not p.is_flag and not p.count,
                "multiple": bool(p.multiple),
                "eager": bool(p.is_eager),
                "param": p.name,
                "complete": completes(p, ctx) if not p.is_flag and not p.count else None,
            }
            for p in command.get_params(ctx)
            if p.param_type_name == "option" and not p.hidden
        ]
        arguments = [
            {"nargs": p.nargs, "complete": completes(p, ctx)}
            for p in command.get_params(ctx)
            if p.param_type_name == "argument"
        ]
        tree[path] = {"commands": names, "options": options, "arguments": arguments}
        args = path.split()
        once("help", path, _run_app([*args, "--help"], PROG)[0], {p: _run_app([*args, "--help"], p)[0] for p in PROGS})
        if names:
            once("bare", path, _bare(args, PROG), {p: _bare(args, p) for p in PROGS})
        for name in names:
            visit(command.commands[name], f"{path} {name}".strip(), ctx)

    visit(get_command(app), "", None)
    return {"version": __version__, **texts, **exceptions, "tree": tree}


def _bare(args: list[str], prog: str) -> list[Any]:
    """A group run without its subcommand: (stream, text, exit code)."""
    out, err, code = _run_app(args, prog)
    return ["err" if err else "out", err or out, code]


def _completion_probe() -> Any:
    """What a parameter's values complete from, found by asking its completion once: the kind of names it asks
    :func:`gpuctl.cli.names.complete_names` for (names the cluster holds), the fixed list it answers, or None
    (nothing of its own: the app answers)."""
    from gpuctl.cli import names

    def probe(param: Any, ctx: Any) -> Any:
        if getattr(param, "_custom_shell_complete", None) is None:
            return None
        asked: list[str] = []
        real = names.complete_names

        def recorder(_ctx: Any, kind: str, _incomplete: str) -> list[str]:
            asked.append(kind)
            return []

        names.complete_names = recorder  # type: ignore[assignment]
        try:
            values = [item.value for item in param.shell_complete(ctx, "")]
        finally:
            names.complete_names = real
        return asked[0] if asked else values

    return probe


def startup_module() -> str:
    import pprint

    return (
        '"""Generated by ``python -m gpuctl.cli.docgen`` (``make docs``) from the command tree; read by\n'
        '``gpuctl.cli.startup``. Do not edit."""\n\n'
        "from __future__ import annotations\n\n"
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:  # typing itself is not imported at start-up\n"
        "    from typing import Any\n\n"
        f"TABLE: dict[str, Any] = {pprint.pformat(startup_table(), width=120, sort_dicts=True)}\n"
    )


def generate(root: Path) -> list[Path]:
    """Write man/, completions/ and the start-up table under ``root``; return the files written."""
    from gpuctl.cli.commands.completion import PLUGIN_SHIM, Shell, script
    from gpuctl.cli.main import app
    from gpuctl.cli.vendored import get_command

    group = get_command(app)
    written: list[Path] = []
    man = root / "man"
    man.mkdir(parents=True, exist_ok=True)
    pages = {"gpuctl": man_page(group, "gpuctl", "gpuctl")}
    for name, command in sorted(group.commands.items()):  # type: ignore[attr-defined]
        pages[f"gpuctl-{name}"] = man_page(command, f"gpuctl {name}", f"gpuctl-{name}")
    for name, text in pages.items():
        path = man / f"{name}.1"
        path.write_text(text)
        written.append(path)
    comp = root / "completions"
    comp.mkdir(parents=True, exist_ok=True)
    files = {
        "gpuctl.bash": script(Shell.BASH),
        "_gpuctl": script(Shell.ZSH),
        "gpuctl.fish": script(Shell.FISH),
        "kubectl-gpuctl.bash": script(Shell.BASH, "kubectl-gpuctl"),
        "kubectl_complete-gpuctl": PLUGIN_SHIM,
    }
    table = root / "gpuctl" / "cli" / "startup_table.py"
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(startup_module())
    written.append(table)
    for name, text in files.items():
        path = comp / name
        path.write_text(text)
        if name == "kubectl_complete-gpuctl":
            path.chmod(0o755)
        written.append(path)
    return written


if __name__ == "__main__":
    for p in generate(Path(sys.argv[1] if len(sys.argv) > 1 else ".")):
        print(p)

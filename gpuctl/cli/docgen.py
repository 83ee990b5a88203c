"""Generate the files shipped beside the code from the command tree: man pages and shell completions.

    python -m gpuctl.cli.docgen [ROOT]

A test regenerates them into a temporary directory and fails when the committed ones are stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gpuctl import __version__

MAN_DATE = "2026-11"


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
    from typer._click import Context

    return Context(command, info_name=command.name)


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
                from gpuctl.cli.help import EXAMPLES

                sub_examples = EXAMPLES.get(f"{path.removeprefix('gpuctl').strip()} {name}".strip(), "")
                if sub_examples:
                    lines += [".PP", "Examples:", ".nf", _roff(sub_examples.strip("\n")), ".fi"]
                lines.append(".RE")
    opts = _options(command)
    if opts:
        lines += [".SH OPTIONS", *opts]
    from gpuctl.cli.help import ENVIRONMENT, EXAMPLES, EXIT_STATUS

    examples = EXAMPLES.get(path.removeprefix("gpuctl").strip() or "", "")
    if examples:
        lines += [".SH EXAMPLES", ".nf", _roff(examples.strip("\n")), ".fi"]
    lines += [".SH EXIT STATUS", ".nf", _roff(EXIT_STATUS), ".fi"]
    lines += [".SH ENVIRONMENT", ".nf", _roff(ENVIRONMENT), ".fi"]
    lines += [".SH SEE ALSO", "\\fBgpuctl\\fR(1), \\fBkubectl\\fR(1)"]
    return "\n".join(lines) + "\n"


def generate(root: Path) -> list[Path]:
    """Write man/ and completions/ under ``root``; return the files written."""
    import typer.main

    from gpuctl.cli.completion import PLUGIN_SHIM, Shell, script
    from gpuctl.cli.main import app

    group = typer.main.get_command(app)
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

"""Where every command is declared: once, beside the function that runs it.

A declaration names the command, gives its one-sentence summary (the command list), its examples (after its help and
in its man page), the shared option sets it takes and where it is listed::

    @command(
        "views",
        summary="Show what each pool can still give (EX/SH/SL/PT).",
        examples=EXAMPLES,
        listed=10,
        source=SourceFlags(selectors=True, fleet=True),
        output=OutputFlags(labels=True),
    )
    def views_command(names: ..., *, source: SourceSpec, output: OutputSpec) -> None:
        '''Its help: the first paragraph, then the rest.'''

A group of commands is declared with :func:`group`; its commands name it first (``@command("explain workload",
...)``), in the same module.

The commands live in ``gpuctl.cli.commands``, one module per top-level command or group, named after it: the root
group (:mod:`gpuctl.cli.main`) imports ``gpuctl.cli.commands.NAME`` only when ``gpuctl NAME`` runs, and every module
only to list them all (help, completion, the man pages and the start-up table).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import typer

from gpuctl.cli.errors import handled, running
from gpuctl.cli.options import install, output_options, source_options

F = TypeVar("F", bound=Callable[..., Any])

COMMANDS = "gpuctl.cli.commands"
"""The package whose modules declare the commands."""


@dataclass(frozen=True)
class SourceFlags:
    """kubectl's connection and list flags, handed to the command as one ``source`` (see
    :func:`~gpuctl.cli.options.source_options`): ``namespaced`` reads ``-n`` or ``-A``, ``namespace`` one namespace,
    ``selectors`` takes ``-l``/``--field-selector``, ``fleet`` several clusters."""

    namespaced: bool = False
    namespace: bool = False
    selectors: bool = False
    fleet: bool = False


@dataclass(frozen=True)
class OutputFlags:
    """The output flags, handed to the command as one ``output`` (see :func:`~gpuctl.cli.options.output_options`)."""

    sort: bool = True
    labels: bool = False
    default: str = "table"


@dataclass
class Declared:
    """A top-level command or group as its module declared it."""

    name: str
    app: typer.Typer
    """One command, or a group and its commands."""
    listed: int
    """Where the command list shows it (lowest first)."""
    examples: dict[str, str] = field(default_factory=dict)
    """Path (``explain workload``) → its examples, for the command and, in a group, each of its commands."""


DECLARED: dict[str, Declared] = {}
"""Top-level name → its declaration, filled as the command modules are imported."""


def epilog(examples: str) -> str | None:
    """The ``Examples:`` block shown after a command's help (click keeps a block marked ``\\b`` as written)."""
    if not examples:
        return None
    # click rewraps every paragraph but one marked with \b: mark each.
    return "\b\nExamples:" + examples.replace("\n\n", "\n\n\b\n")


def group(name: str, *, summary: str, help: str, examples: str = "", listed: int) -> None:
    """Declare a group of commands: ``summary`` in the command list, ``help`` atop its own help."""
    app = typer.Typer(
        name=name,
        help=help,
        short_help=summary,
        epilog=epilog(examples),
        no_args_is_help=True,
        rich_markup_mode=None,
        add_completion=False,
    )
    app.callback()(_group_of_one)  # a group with one command stays a group
    DECLARED[name] = Declared(name, app, listed, {name: examples})


def _group_of_one() -> None:
    pass


def command(
    path: str,
    *,
    summary: str,
    examples: str = "",
    listed: int | None = None,
    source: SourceFlags | None = None,
    output: OutputFlags | None = None,
) -> Callable[[F], F]:
    """Declare a command: ``path`` is its name, or its group's and its own (``"explain workload"``); ``listed`` places
    a top-level command in the command list. The function is returned as written (its tests call it directly)."""

    def declare(fn: F) -> F:
        run: Callable[..., Any] = fn
        if output is not None:
            run = output_options(sort=output.sort, labels=output.labels, default=output.default)(run)
        if source is not None:
            run = source_options(
                namespaced=source.namespaced, namespace=source.namespace, selectors=source.selectors, fleet=source.fleet
            )(run)
        parent, _, name = path.rpartition(" ")
        if parent:
            declared = DECLARED[parent]
            declared.examples[path] = examples
        else:
            if listed is None:
                raise TypeError(f"command {path!r}: say where it is listed (listed=)")
            app = typer.Typer(rich_markup_mode=None, add_completion=False)
            declared = DECLARED[path] = Declared(path, app, listed, {path: examples})
        declared.app.command(name, short_help=summary, epilog=epilog(examples))(_knowing_its_path(handled(run)))
        return fn

    return declare


def _knowing_its_path(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` told by Typer the context it runs in, so that messages name the command as the user typed it."""
    sig = inspect.signature(fn)
    context = inspect.Parameter("command_context", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        ctx: typer.Context = kwargs.pop("command_context")
        with running(ctx.command_path):
            return fn(**kwargs)

    install(wrapper, sig.replace(parameters=[*sig.parameters.values(), context]))
    return wrapper


# ----------------------------------------------------------------------------------------------- finding them

_NAME = re.compile(r"[a-z][a-z0-9-]*")


def declared(name: str) -> Declared | None:
    """The declaration of ``gpuctl NAME``, importing only its module; None when there is no such command."""
    if name not in DECLARED and _NAME.fullmatch(name):
        module = f"{COMMANDS}.{name.replace('-', '_')}"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    return DECLARED.get(name)


def every() -> list[Declared]:
    """Every command and group, in the order the command list shows them (every command module imported)."""
    package = importlib.import_module(COMMANDS)
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{COMMANDS}.{info.name}")
    return sorted(DECLARED.values(), key=lambda d: (d.listed, d.name))


def examples(path: str) -> str:
    """The examples declared for a command (``"views"``, ``"explain workload"``), or ""."""
    top = path.split(" ", 1)[0]
    found = declared(top)
    return found.examples.get(path, "") if found else ""


class Commands(MutableMapping[str, Any]):
    """The root group's commands, built as they are asked for: ``gpuctl views`` imports the views module alone."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        built = self._built.get(name)
        if built is None:
            from gpuctl.cli.vendored import get_command

            found = declared(name)
            if found is None:
                raise KeyError(name)
            built = self._built[name] = get_command(found.app)
        return built

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        names = [d.name for d in every()]
        return iter(names + [n for n in self._built if n not in names])

    def __len__(self) -> int:
        return len(list(iter(self)))

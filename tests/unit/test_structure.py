"""The shape of the code: no import cycle anywhere (an import inside a function counts), no module too long to read,
and commands and controllers that stand alone.

Imports are read from the source (every ``import`` and ``from ... import`` statement, at any depth), not from what a
run happens to load.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gpuctl", "testbed", "bench", "hack")
GENERATED = {"gpuctl/cli/startup_table.py"}
LONGEST = 800


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = modules()


def imports(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """The modules of this tree that ``name`` imports (an import of a name from a package counts for the package,
    and for the submodule when the name is one), with the line of each import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for target in targets:
            if target in MODULES and target != name:
                yield target, node.lineno


GRAPH = {name: sorted(set(imports(name, path))) for name, path in MODULES.items()}


def cycles(graph: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                target = step[0]
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_walk_sees_function_level_imports() -> None:
    assert ("gpuctl.cli.main", 0) not in GRAPH["gpuctl.cli.startup"]
    assert "gpuctl.cli.main" in {t for t, _ in GRAPH["gpuctl.cli.startup"]}  # imported inside run()
    assert cycles({"a": [("b", 1)], "b": [("c", 2)], "c": [("a", 3)], "d": [("a", 4)]}) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    found = cycles(GRAPH)
    described = [
        " -> ".join(f"{m} (line {line})" for m in cycle for t, line in GRAPH[m] if t in cycle) for cycle in found
    ]
    assert found == [], "\n".join(described)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("gpuctl")))
def test_no_module_is_over_800_lines(name: str) -> None:
    path = MODULES[name]
    if str(path.relative_to(ROOT)) in GENERATED:
        return
    lines = len(path.read_text().splitlines())
    assert lines <= LONGEST, f"{path.relative_to(ROOT)} has {lines} lines: split it by concern"


@pytest.mark.parametrize(
    ("package", "shared"),
    [
        ("gpuctl.cli.commands", set()),
        ("gpuctl.operator.controllers", {"gpuctl.operator.controllers.base"}),
    ],
)
def test_a_command_or_a_controller_imports_none_of_its_siblings(package: str, shared: set[str]) -> None:
    """What two commands (or two controllers) share lives outside them, so each stands alone: adding one touches its
    own module."""
    members = {n for n in MODULES if n.startswith(f"{package}.")}
    manager = {f"{package}.manager"}
    crossing = {
        (name, target) for name in members - manager - shared for target, _ in GRAPH[name] if target in members - shared
    }
    assert crossing == set()

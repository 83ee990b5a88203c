"""The core stays pure: importing it loads no client, CLI, rendering or YAML library."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("kubernetes", "typer", "rich", "yaml", "click")


def test_importing_the_core_loads_no_heavy_library() -> None:
    code = (
        "import json, sys, pkgutil, importlib, gpuctl.core as core\n"
        "for m in pkgutil.iter_modules(core.__path__): importlib.import_module('gpuctl.core.' + m.name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {list(HEAVY)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == []


def test_the_core_does_not_import_the_shells() -> None:
    code = (
        "import json, sys, pkgutil, importlib, gpuctl.core as core\n"
        "for m in pkgutil.iter_modules(core.__path__): importlib.import_module('gpuctl.core.' + m.name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('gpuctl.cli', 'gpuctl.cluster', 'gpuctl.operator')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == []

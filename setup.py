"""The one thing the build adds to pyproject.toml: the wheel carries the building Python's bytecode of gpuctl's modules.

pip compiles what it installs, but an installer that does not (``pip install --no-compile``, or one that leaves it to
an option) leaves the sources alone, and where ``PYTHONDONTWRITEBYTECODE`` is set, as it is in many images, every run
then compiles every module it imports. The bytecode here is hash-checked (no source times in it, so it stays valid
when an installer gives the files new times, and the wheel stays reproducible): the Python it was built with reads it
wherever the source still matches, and recompiles a source that was edited. Other versions ignore it (its name holds
the version's tag) and compile as they would without it.
"""

from __future__ import annotations

import os
import py_compile
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithBytecode(build_py):
    def byte_compile(self, files: list[str]) -> None:
        sources = [f for f in files if f.endswith(".py")]
        # The build directory outlives a build: no bytecode from an earlier one (another version's, a removed module's).
        for directory in {os.path.dirname(f) for f in sources}:
            shutil.rmtree(os.path.join(directory, "__pycache__"), ignore_errors=True)
        if self.compile or self.optimize:  # setuptools' own options (off unless asked for)
            super().byte_compile(files)
        tag = sys.implementation.cache_tag
        if tag is None:  # an implementation that reads no bytecode
            return
        for source in sources:
            directory, name = os.path.split(source)
            # Beside the source, where the import system looks, whatever PYTHONPYCACHEPREFIX the build runs under.
            cached = os.path.join(directory, "__pycache__", f"{name[:-3]}.{tag}.pyc")
            py_compile.compile(
                source,
                cfile=cached,
                # The name the code objects carry: the module's path inside the wheel (imports put the real one back).
                dfile=os.path.relpath(source, self.build_lib).replace(os.sep, "/"),
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
            )


setup(cmdclass={"build_py": BuildPyWithBytecode})

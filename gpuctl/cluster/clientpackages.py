"""The official client's packages, loaded as the raw request path needs them: :func:`client_packages`."""

from __future__ import annotations

import sys
from typing import Any

CLIENT_NAMES = {
    "ApiClient": ("kubernetes.client.api_client", "ApiClient"),
    "Configuration": ("kubernetes.client.configuration", "Configuration"),
}
"""What gpuctl (and the client's own ``config`` loaders) take from the ``kubernetes.client`` package."""


def client_packages() -> tuple[Any, Any]:
    """``kubernetes.client`` and ``kubernetes.config``, without running the ``kubernetes``, ``kubernetes.client`` and
    ``kubernetes.client.models`` package initialisers, which import every API class and every model (about 800
    modules, most of the client's import time) where gpuctl uses four modules on the raw request path.

    The packages are put in place as modules whose names resolve on first use: the names above and submodules are
    imported as asked for, and any other name runs the package's own initialiser into the same module first, so code
    that uses the client in full (``client.CoreV1Api``) gets exactly what a plain import gives. Where ``kubernetes``
    is already imported, it is used as it is."""
    if "kubernetes" not in sys.modules:
        _lazy_package("kubernetes", {})
        _lazy_package("kubernetes.client", CLIENT_NAMES)
        _lazy_package("kubernetes.client.models", {})
        # Its submodules are also names of its own (``create_from_yaml``): the initialiser decides what they are.
        _lazy_package("kubernetes.utils", {}, initialise_first=True)
    import kubernetes.client
    import kubernetes.config

    return kubernetes.client, kubernetes.config


def _lazy_package(name: str, names: dict[str, tuple[str, str]], initialise_first: bool = False) -> None:
    import importlib
    import importlib.util
    import types

    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    module = types.ModuleType(name)
    module.__path__ = list(spec.submodule_search_locations)
    module.__spec__ = spec
    module.__file__ = spec.origin
    module.__package__ = name
    module.__loader__ = spec.loader
    state = {"initialised": False}

    def resolve(attr: str) -> Any:
        def submodule() -> bool:
            return not attr.startswith("__") and importlib.util.find_spec(f"{name}.{attr}") is not None

        if attr in names:
            where, what = names[attr]
            value = getattr(importlib.import_module(where), what)
        elif not state["initialised"] and (initialise_first or not submodule()):
            state["initialised"] = True
            spec.loader.exec_module(module)  # type: ignore[union-attr]
            # The package's own initialiser may resolve names lazily itself (the 37 line's ``kubernetes.client``
            # defines a module ``__getattr__``, which replaces this one): ask the module as a plain import would.
            value = getattr(module, attr)
        elif submodule():
            value = importlib.import_module(f"{name}.{attr}")
        else:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        setattr(module, attr, value)
        return value

    module.__getattr__ = resolve  # type: ignore[method-assign]
    sys.modules[name] = module

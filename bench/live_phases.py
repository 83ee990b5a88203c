"""Where a live read's time goes, measured inside one process as ``gpuctl`` runs it: the imports (the app and the
client), the connection (kubeconfig and client configuration), the requests, and the rendering.

    python bench/live_phases.py views KUBECONFIG
    python bench/live_phases.py explain KUBECONFIG NAMESPACE/NAME

Prints one JSON object of seconds. Run by ``bench.run`` with the interpreter of the installed gpuctl.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys
import time


def main() -> None:
    what, kubeconfig, *rest = sys.argv[1:]
    started = time.perf_counter()
    import gpuctl.cli.main  # noqa: F401 - the app, as the command imports it
    from gpuctl.cli import render
    from gpuctl.cli.usecases import compute_items, explained, explanation_text
    from gpuctl.cluster.clientpackages import client_packages
    from gpuctl.cluster.live import Connection, LiveSource

    command = importlib.import_module(f"gpuctl.cli.commands.{what}")  # the root group imports the one that runs

    client_packages()
    imported = time.perf_counter()
    source = LiveSource(Connection(kubeconfig))
    source._api()
    connected = time.perf_counter()
    out = io.StringIO()
    if what == "views":
        items = compute_items(source, [], None)
        requested = time.perf_counter()
        with contextlib.redirect_stdout(out):
            render.emit(command.listing(items, False), render.parse_output("table"))
    else:
        namespace, name = rest[0].split("/", 1)
        explanation = explained(source, namespace, name)
        requested = time.perf_counter()
        out.write(explanation_text(explanation))
    rendered = time.perf_counter()
    print(
        json.dumps(
            {
                "imports": imported - started,
                "connection": connected - imported,
                "requests": requested - connected,
                "render": rendered - requested,
            }
        )
    )


if __name__ == "__main__":
    main()

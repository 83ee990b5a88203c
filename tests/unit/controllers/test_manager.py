"""The manager runs every controller the package defines and passes each cache event to the watches of its kind."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from gpuctl.operator.controllers import Controller, Watch
from gpuctl.operator.controllers.manager import controller_classes
from tests.unit.controllers.harness import A10G_TYPE, cluster_with, drain

ROOT = Path(__file__).resolve().parents[3]


def test_every_controller_of_the_package_runs_once() -> None:
    names = [c.name for c in controller_classes()]
    assert sorted(names) == [
        "admission-check-active",
        "fit-labels",
        "instance-stop",
        "instancetype-status",
        "node-devices-check",
    ]
    _, controllers = cluster_with()
    assert [c.name for c in controllers.all] == names


def test_a_controller_defined_outside_the_package_is_not_run() -> None:
    class Elsewhere(Controller):
        name = "elsewhere"

        def watches(self) -> tuple[Watch, ...]:
            return ()

    assert Elsewhere not in controller_classes()


def test_an_event_reaches_the_watches_of_its_kind_only() -> None:
    cluster, controllers = cluster_with()
    owners = {kind.kind: sorted(c.name for c, _ in pairs) for kind, pairs in controllers.watching.items()}
    assert owners == {
        "AdmissionCheck": ["admission-check-active"],
        "ClusterQueue": ["instance-stop", "instancetype-status"],
        "Devices": ["fit-labels", "instancetype-status", "node-devices-check"],
        "Instance": ["instance-stop"],
        "InstanceType": ["instance-stop", "instancetype-status"],
        "Node": ["fit-labels", "instancetype-status", "node-devices-check"],
        "Pod": ["node-devices-check"],
        "ResourceFlavor": ["node-devices-check"],
        "Workload": ["node-devices-check"],
    }
    cluster.put(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": "a"}}
    )
    assert [c.name for c in controllers.all if drain(c)] == []  # no controller watches them
    cluster.put({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": A10G_TYPE}})
    woken = {c.name: drain(c) for c in controllers.all}
    assert {name for name, keys in woken.items() if keys} == {"instancetype-status"}  # the pool's own queue


def test_a_new_module_in_the_package_is_a_new_controller(tmp_path: Path) -> None:
    (tmp_path / "node_notes.py").write_text(
        textwrap.dedent(
            """
            from gpuctl.cluster import kinds
            from gpuctl.operator.controllers.base import Controller, Watch


            class NodeNotes(Controller):
                name = "node-notes"
                kind = kinds.NODE

                def watches(self):
                    return (Watch(kinds.NODE, lambda key, _old, _new: [key]),)

                def reconcile(self, key):
                    pass
            """
        )
    )
    code = textwrap.dedent(
        f"""
        import json
        from gpuctl.operator import controllers
        controllers.__path__.append({str(tmp_path)!r})
        from testbed.factories import node
        from tests.unit.controllers.harness import cluster_with, drain

        cluster, running = cluster_with()
        cluster.put(node("node-z", labels={{"gpustack.ai/managed": "true"}}))
        notes = next(c for c in running.all if c.name == "node-notes")
        print(json.dumps({{"names": [c.name for c in running.all], "woken": sorted(drain(notes))}}))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert "node-notes" in seen["names"] and seen["woken"] == ["node-z"]


def test_the_first_lists_queue_nothing_and_the_first_resync_queues_every_owned_key() -> None:
    from gpuctl.operator.cache import OperatorCache
    from gpuctl.operator.controllers import Controllers
    from gpuctl.operator.controllers.check import CheckController
    from gpuctl.operator.controllers.fit_labels import FitLabelController
    from gpuctl.operator.metrics import Metrics
    from tests.unit.controllers.harness import pending

    cluster, _ = cluster_with(pending("waits", "node-x"), pending("also", "node-y"))
    cache = OperatorCache(cluster)
    controllers = Controllers(cache, cluster, Metrics())  # listening before the first lists, as when started
    informers = list(cache.informers.values())
    for informer in informers[:-1]:
        informer.relist()
    assert not cache.synced()
    assert [c.name for c in controllers.all if drain(c)] == []  # the lists' events woke keys, none queued
    check = controllers.get(CheckController)
    assert set(check.reserved_seen) == {"team-a/waits", "team-a/also"}  # what the watches saw is kept
    informers[-1].relist()
    cluster.feed(cache)
    assert cache.synced()
    controllers.resync()
    assert drain(check) == {"team-a/waits", "team-a/also"}
    assert drain(controllers.get(FitLabelController)) == {"node-x", "node-y"}
    cluster.put(pending("later", "node-x"))  # once synced, events queue their keys
    assert drain(check) == {"team-a/later"}


def test_a_leader_exports_the_cluster_wide_series_only_once_its_cache_holds_its_first_lists() -> None:
    """Series read off a half-listed cache would bill less than the cluster holds: a replica that leads from the
    start (the Lease's creator, or one run without leader election) exports them once every kind is listed."""
    import threading

    from gpuctl.operator.cache import OperatorCache
    from gpuctl.operator.controllers import Controllers
    from gpuctl.operator.controllers.status import StatusController
    from gpuctl.operator.metrics import Metrics
    from tests.unit.controllers.harness import pending

    cluster, _ = cluster_with(pending("waits", "node-x"))
    cache = OperatorCache(cluster)
    controllers = Controllers(cache, cluster, Metrics())
    informers = list(cache.informers.values())
    for informer in informers[:-1]:
        informer.relist()
    stop = threading.Event()
    controllers.start(stop, lambda: True)
    try:
        status = controllers.get(StatusController)
        assert not status.leading() and list(status.gauges()) == [] and list(status.texts()) == []
        informers[-1].relist()
        cluster.feed(cache)
        assert status.leading() and list(status.texts()) != []
    finally:
        stop.set()

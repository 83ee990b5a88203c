"""The operator's controllers, event-driven and level-triggered (the client-go pattern), one module each:

- ``check``: gate 3, the ``gpustack-node-devices`` AdmissionCheck (key: a Workload);
- ``status``: the InstanceType status writer (key: an InstanceType), and the pool and queue gauges;
- ``fit_labels``: the per-card fit labels (key: a Node);
- ``instance_stop``: the running-instance stop (key: an Instance);
- ``admission_check``: the check's existence and ``Active`` condition (key: the check).

Each controller has a work queue of keys, filled by the cache's events through the watches it declares beside its
reconcile (``base.Watch``: a kind, and the keys one event wakes) and by a slow resync from the cache (no LIST), and
drained by its workers; a key that fails is requeued with a per-key backoff. Reconciling a key reads the cache,
computes the desired state with the core, and writes only differences: merge patches carrying the
``resourceVersion`` read (a conflict requeues the key), and a server-side apply of the check's own entry in a
Workload's ``status.admissionChecks``. The manager (``manager.Controllers``) runs every controller of the package.
"""

from gpuctl.operator.controllers.base import Controller, Watch, Writer
from gpuctl.operator.controllers.manager import Controllers

__all__ = ["Controller", "Controllers", "Watch", "Writer"]

"""Leader election on a coordination.k8s.io Lease, so two replicas never run the controllers at once.

Both replicas serve webhooks; only the holder of the Lease writes from its controllers.
"""

from __future__ import annotations

import datetime
import socket
import threading
import uuid
from collections.abc import Mapping

from gpuctl.cluster.errors import SourceError
from gpuctl.cluster.kinds import LEASE
from gpuctl.cluster.live import ConflictError, LiveSource
from gpuctl.core.naming import OPERATOR_NAME

LEASE_SECONDS = 15
"""How long a Lease holds without renewal: a standby takes over at most this long (plus a retry) after the leader
stopped renewing."""
RETRY_SECONDS = 2.0
"""Seconds between two attempts to take or renew the Lease (client-go's retry period): the leader renews this often,
and a standby notices an expired Lease at most this long after it expired."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _stamp(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None


class LeaderElector:
    def __init__(
        self,
        source: LiveSource,
        namespace: str,
        name: str = OPERATOR_NAME,
        lease_seconds: int = LEASE_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        self.annotations = dict(annotations or {})
        """Written on the Lease by whoever holds it (the port it serves the webhooks on)."""
        self.source = source
        self.namespace = namespace
        self.name = name
        self.lease_seconds = lease_seconds
        self.retry_seconds = min(retry_seconds, lease_seconds / 3)
        self.identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
        self._renewed: datetime.datetime | None = None

    def holds(self, margin: float = 2.0) -> bool:
        """Whether the Lease this replica last renewed is certainly still its own (the renewal not yet stale)."""
        return self._renewed is not None and (_now() - self._renewed).total_seconds() < self.lease_seconds - margin

    def try_acquire(self) -> bool:
        """Take or renew the Lease; True while this replica holds it."""
        now = _now()
        try:
            lease = self.source.get(LEASE, self.name, self.namespace)
        except SourceError:
            return False
        spec_new = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": _stamp(now),
        }
        try:
            if lease is None:
                self.source.create(
                    LEASE,
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace, "annotations": self.annotations},
                        "spec": {**spec_new, "acquireTime": _stamp(now)},
                    },
                    namespace=self.namespace,
                )
                self._renewed = now  # the creator holds it: its first pass runs
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            renewed = _parse(spec.get("renewTime"))
            expired = renewed is None or (now - renewed).total_seconds() > int(
                spec.get("leaseDurationSeconds") or self.lease_seconds
            )
            if holder != self.identity and not expired:
                return False
            patch = {
                "metadata": {"resourceVersion": lease["metadata"]["resourceVersion"], "annotations": self.annotations},
                "spec": spec_new if holder == self.identity else {**spec_new, "acquireTime": _stamp(now)},
            }
            self.source.patch(LEASE, self.name, patch, namespace=self.namespace)
            self._renewed = now
            return True
        except ConflictError:
            return False
        except SourceError:
            return False

    def run(self, stop: threading.Event) -> None:
        """Take or renew the Lease every :data:`RETRY_SECONDS` (at most a third of its duration) until stopped."""
        while not stop.is_set():
            self.try_acquire()
            stop.wait(max(0.5, self.retry_seconds))

"""The kubeconfig as kubectl reads it: the file(s) named by ``--kubeconfig`` or ``$KUBECONFIG`` (else
``~/.kube/config``), a context chosen by ``--context`` (else the current one) whose cluster and user ``--cluster`` and
``--user`` may replace, and ``--server``/``--token`` over all of it. Errors name what is wrong and the way out — an
unknown context lists the contexts there are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuctl.cluster.errors import NoKubeconfig, SourceError
from gpuctl.core.errors import not_text


@dataclass(frozen=True, slots=True)
class Selection:
    """What of a kubeconfig a command asked for."""

    kubeconfig: str | None = None
    context: str | None = None
    cluster: str | None = None
    user: str | None = None


def kubeconfig_paths(explicit: str | None) -> list[Path]:
    if explicit:
        return [Path(explicit).expanduser()]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    return [Path("~/.kube/config").expanduser()]


def _named(entries: Any, what: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for e in entries if isinstance(entries, list) else []:
        if isinstance(e, Mapping) and isinstance(e.get("name"), str):
            value = e.get(what)
            out.setdefault(e["name"], value if isinstance(value, Mapping) else {})
    return out


@dataclass(frozen=True)
class Kubeconfig:
    """The merged kubeconfig files (the first file to define a name wins, as kubectl merges them)."""

    paths: tuple[Path, ...]
    current: str
    contexts: Mapping[str, Mapping[str, Any]]
    clusters: Mapping[str, Mapping[str, Any]]
    users: Mapping[str, Mapping[str, Any]]
    raw: Mapping[str, Any]

    @property
    def where(self) -> str:
        return ", ".join(str(p) for p in self.paths)

    def context(self, name: str | None) -> tuple[str, Mapping[str, Any]]:
        chosen = name or self.current
        if not chosen:
            raise SourceError(
                f"{self.where} sets no current-context: pass --context (contexts: {self._names(self.contexts)})"
            )
        ctx = self.contexts.get(chosen)
        if ctx is None:
            raise SourceError(f'context "{chosen}" not found in {self.where}; contexts: {self._names(self.contexts)}')
        return chosen, ctx

    def namespace(self, selection: Selection) -> str | None:
        """The namespace of the selected context (kubectl's default for ``-n``), if it sets one."""
        _, ctx = self.context(selection.context)
        ns = ctx.get("namespace")
        return ns if isinstance(ns, str) and ns else None

    def resolved(self, selection: Selection) -> dict[str, Any]:
        """A one-context kubeconfig dict with ``--cluster`` and ``--user`` applied (for the client's loader)."""
        name, ctx = self.context(selection.context)
        cluster = selection.cluster or str(ctx.get("cluster") or "")
        user = selection.user or str(ctx.get("user") or "")
        if cluster not in self.clusters:
            raise SourceError(f'cluster "{cluster}" not found in {self.where}; clusters: {self._names(self.clusters)}')
        if user and user not in self.users:
            raise SourceError(f'user "{user}" not found in {self.where}; users: {self._names(self.users)}')
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": name,
            "contexts": [{"name": name, "context": {**ctx, "cluster": cluster, "user": user}}],
            "clusters": [{"name": cluster, "cluster": dict(self.clusters[cluster])}],
            "users": [{"name": user, "user": dict(self.users.get(user, {}))}],
        }

    def cluster_identity(self, context: str, server: str | None = None) -> tuple[str, str] | None:
        """What tells clusters apart: the server address a context reaches (``--server`` over it) and the CA it
        trusts (the data, or the file's contents); None when the context cannot be read (its own read says why)."""
        import base64

        ctx = self.contexts.get(context)
        cluster = self.clusters.get(str((ctx or {}).get("cluster") or ""))
        if ctx is None or cluster is None:
            return None
        address = str(server or cluster.get("server") or "").rstrip("/")
        ca = str(cluster.get("certificate-authority-data") or "")
        path = cluster.get("certificate-authority")
        if not ca and isinstance(path, str) and path:
            try:
                ca = base64.b64encode(Path(path).expanduser().read_bytes()).decode()
            except OSError:
                ca = f"file:{path}"
        return address, ca

    @staticmethod
    def _names(entries: Mapping[str, Any]) -> str:
        return ", ".join(sorted(entries)) or "none"


def load(explicit: str | None) -> Kubeconfig:
    """Read and merge the kubeconfig files; a missing or unreadable one is one line naming it."""
    import yaml

    paths = kubeconfig_paths(explicit)
    contexts: dict[str, Mapping[str, Any]] = {}
    clusters: dict[str, Mapping[str, Any]] = {}
    users: dict[str, Mapping[str, Any]] = {}
    current = ""
    raw: dict[str, Any] = {}
    found = []
    for path in paths:
        if not path.exists():
            if explicit:
                raise SourceError(f"kubeconfig {path}: no such file; pass --kubeconfig with a readable file")
            continue
        try:
            if path.stat().st_size > 16 * 1024 * 1024:
                raise SourceError(f"kubeconfig {path}: larger than 16 MiB; not a kubeconfig")
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            detail = (
                not_text(exc)
                if isinstance(exc, UnicodeDecodeError)
                else getattr(exc, "problem", None) or str(exc).splitlines()[0]
            )
            raise SourceError(f"kubeconfig {path}: cannot read it: {detail}") from None
        if data is None:
            continue
        if not isinstance(data, Mapping):
            raise SourceError(f"kubeconfig {path}: not a kubeconfig (expected a mapping with contexts and clusters)")
        found.append(path)
        raw = raw or dict(data)
        current = current or str(data.get("current-context") or "")
        for name, value in _named(data.get("contexts"), "context").items():
            contexts.setdefault(name, value)
        for name, value in _named(data.get("clusters"), "cluster").items():
            clusters.setdefault(name, value)
        for name, value in _named(data.get("users"), "user").items():
            users.setdefault(name, value)
    if not found:
        where = ", ".join(str(p) for p in paths)
        raise NoKubeconfig(f"no kubeconfig at {where}: pass --kubeconfig, set KUBECONFIG, or use --snapshot")
    return Kubeconfig(tuple(found), current, contexts, clusters, users, raw)

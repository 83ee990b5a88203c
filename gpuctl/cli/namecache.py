"""The names shell completion offers (InstanceTypes, Workloads, Instances, Pods, namespaces, profiles, contexts),
kept between TABs so that completing one does not start the app, read a snapshot or connect to a cluster.

A cache entry is named by everything that decides what the app would answer: the snapshot's files (path, size,
modification and change times), or the kubeconfig files (the same) and every connection flag (``--context``,
``--cluster``, ``--user``, ``--server``, a digest of ``--token``, ``--as``, ``--as-group``), and ``-n``. So an entry
never answers for another cluster, user or namespace, and a snapshot whose files changed is read again.

- From a snapshot, an entry holds as long as its files do.
- From a cluster, an entry answers for :data:`MAX_AGE` seconds; one older than :data:`FRESH` seconds is refreshed by
  a process started in the background, so the next TAB sees what changed (names may be a few seconds stale; a name
  that no longer exists then fails the command with "not found", as a typo would).
- Contexts are read from the kubeconfig files alone, and kept as long as those files are unchanged.

Entries are one small text file each under ``$GPUCTL_CACHE_DIR``, ``$XDG_CACHE_HOME/gpuctl/names`` or
``~/.cache/gpuctl/names`` (mode 0600 in a 0700 directory); no credential is ever written to one.

Imports nothing but ``os`` and ``sys`` (and ``zlib``, ``time``, ``hashlib`` when needed): it runs before the app.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing itself is not imported at start-up
    from collections.abc import Mapping
    from typing import Any

FRESH = 5.0
"""Seconds a cluster's names are used without being read again in the background."""
REFRESH_RETRY = 30.0
"""Seconds after which a refresh that has not written its entry (a cluster that did not answer) may start again."""
MAX_AGE = 3600.0
"""Seconds a cluster's names are offered at all; older ones are read again before answering."""
REFRESH_VAR = "_GPUCTL_NAMES_REFRESH"
"""Set in the background process that reads a cluster's names again: it writes them and prints nothing."""
SNAPSHOT_SUFFIXES = (".json", ".yaml", ".yml")
FORMAT = "gpuctl-names 1"


def cache_dir(env: Mapping[str, str]) -> str | None:
    """Where entries live, from the environment given (None when it names no home: no cache)."""
    explicit = env.get("GPUCTL_CACHE_DIR")
    if explicit:
        return explicit
    base = env.get("XDG_CACHE_HOME") or (os.path.join(env["HOME"], ".cache") if env.get("HOME") else "")
    return os.path.join(base, "gpuctl", "names") if base else None


def _stamp(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}:missing"
    return f"{path}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"


def _snapshot_files(path: str) -> list[str]:
    """The files a snapshot read opens, in its order (as ``gpuctl.cluster.snapshot.snapshot_files`` lists them)."""
    if not os.path.isdir(path):
        return [path]
    files: list[str] = []
    for root, dirs, names in os.walk(path):
        dirs.sort()
        files.extend(
            os.path.join(root, n) for n in sorted(names) if n.endswith(SNAPSHOT_SUFFIXES) and not n.startswith(".")
        )
    return files


def kubeconfig_paths(values: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The kubeconfig files a connection reads: ``--kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``."""
    given = values.get("kubeconfig")
    listed = (
        [given] if isinstance(given, str) and given else [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    )
    home = env.get("HOME", "")
    paths = listed or ([os.path.join(home, ".kube", "config")] if home else [])
    return [os.path.join(home, p[2:]) if p.startswith("~/") and home else p for p in paths]


def _digest(secret: str) -> str:
    import hashlib

    return hashlib.sha256(secret.encode()).hexdigest()


CONNECTION = ("kubeconfig", "context", "cluster", "user", "server")
"""The connection flags a completion reads the cluster with (its ``--request-timeout`` is its own)."""


def identity(kind: str, values: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str, bool] | None:
    """What decides the app's answer for names of ``kind`` given the flags' ``values``: the entry's identity, and
    whether it is a snapshot's (then exact, with no age limit). None when there is nothing to name it by."""
    cwd = os.getcwd()
    parts = [FORMAT, f"kind={kind}", f"limit={env.get('GPUCTL_SNAPSHOT_MAX_BYTES', '')}"]
    if kind == "context":
        parts += [_stamp(os.path.join(cwd, p)) for p in kubeconfig_paths(values, env)]
        return "\n".join(parts), True
    snapshot = values.get("snapshot") or env.get("GPUCTL_SNAPSHOT")
    if isinstance(snapshot, str) and snapshot:
        root = os.path.realpath(os.path.join(cwd, snapshot))
        parts += ["snapshot", root, *(_stamp(f) for f in _snapshot_files(root))]
        namespace = values.get("namespace")
        parts.append(f"namespace={namespace or ''}")
        return "\n".join(parts), True
    parts += ["live", *(_stamp(os.path.join(cwd, p)) for p in kubeconfig_paths(values, env))]
    parts.append(f"in-cluster={env.get('KUBERNETES_SERVICE_HOST', '')}")
    for name in (*CONNECTION, "namespace"):
        parts.append(f"{name}={values.get(name) or ''}")
    token = values.get("token")
    parts.append(f"token={_digest(token) if isinstance(token, str) and token else ''}")
    return "\n".join(parts), False


def _file(directory: str, ident: str) -> str:
    import zlib

    return os.path.join(directory, f"{zlib.crc32(ident.encode()):08x}-{len(ident)}")


def read(ident: str, env: Mapping[str, str]) -> tuple[list[str], float, float] | None:
    """The names an entry holds, its age and the age of the last refresh started (seconds); None when there is none
    for exactly this identity."""
    import time

    directory = cache_dir(env)
    if directory is None:
        return None
    try:
        with open(_file(directory, ident), encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    head, sep, body = text.partition("\n\n")
    lines = head.split("\n")
    if not sep or len(lines) < 2 or "\n".join(lines[2:]) != ident:
        return None
    try:
        written, refreshing = float(lines[0]), float(lines[1])
    except ValueError:
        return None
    now = time.time()
    return [n for n in body.split("\n") if n], now - written, now - refreshing


def write(
    ident: str, names: list[str], env: Mapping[str, str], *, written: float | None = None, refreshing: float = 0.0
) -> None:
    """Store an entry atomically (mode 0600); never raises."""
    import time

    directory = cache_dir(env)
    if directory is None or any("\n" in n for n in names):
        return
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        path = _file(directory, ident)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            stamp = time.time() if written is None else written
            f.write(f"{stamp}\n{refreshing}\n{ident}\n\n" + "".join(n + "\n" for n in names))
        os.replace(tmp, path)
    except OSError:
        return


def mark_refreshing(ident: str, env: Mapping[str, str]) -> None:
    """Note on an entry that a refresh has started, so that the TABs that follow do not start more."""
    import time

    found = read(ident, env)
    if found is not None:
        now = time.time()
        write(ident, found[0], env, written=now - found[1], refreshing=now)


def refresh_in_background(env: Mapping[str, str]) -> None:
    """Start the app's own completion of the same words in a process of its own (its own session, no terminal), to
    write the entry again; never raises."""
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = f"import sys; sys.path.insert(0, {package_root!r}); from gpuctl.cli.startup import run; run()"
    child_env = {**env, REFRESH_VAR: "1"}
    try:
        os.posix_spawn(
            sys.executable,
            [sys.executable, "-c", code],
            child_env,
            setsid=True,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ],
        )
    except (OSError, AttributeError, NotImplementedError):
        return

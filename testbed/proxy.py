"""A TCP proxy in front of the API server, for fault tests: it can cut every open connection (a watch breaks) or
black-hole the server (connections accepted, nothing forwarded, nothing answered)."""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(512)
        self.port = self.listener.getsockname()[1]
        self.blackholed = False
        self.bytes = 0
        """Bytes forwarded so far, both ways (a benchmark reads the traffic between the operator and the server)."""
        self._pairs: list[tuple[socket.socket, socket.socket | None]] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.blackholed:
                with self._lock:
                    self._pairs.append((client, None))
                threading.Thread(target=self._swallow, args=(client,), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            # Forwarded as it arrives, a segment at a time: Nagle's algorithm would hold a request's second segment
            # for the ACK of its first (the peer delays it up to 40 ms), which no direct connection waits for.
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._pairs.append((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if self.blackholed:
                    continue  # dropped on the floor: the peer hears nothing
                sink.sendall(data)
                with self._lock:
                    self.bytes += len(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_RDWR)

    def _swallow(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while client.recv(65536):
                pass

    def cut(self) -> int:
        """Close every open connection (both ends); returns how many."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, upstream in pairs:
            for s in (client, upstream):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                    s.close()
        return len(pairs)

    def blackhole(self) -> None:
        self.blackholed = True

    def restore(self) -> None:
        self.blackholed = False
        self.cut()

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        self.cut()

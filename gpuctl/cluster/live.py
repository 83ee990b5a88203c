"""Read from (and write to) a live API server through the official ``kubernetes`` client.

Lists go through the client's raw request path (``call_api`` without preloading models) and are decoded as plain JSON:
decoding thousands of objects into the client's typed models costs many times a ``json.loads``. Lists are paginated
(``limit``/``continue``) and selectors are pushed to the server. Every client call of gpuctl lives in this module.
"""

from __future__ import annotations

import builtins
import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuctl.cluster.errors import NotServedError, RefusedError, SelectorError, SourceError
from gpuctl.cluster.failures import cause as _cause
from gpuctl.cluster.kinds import Kind

PAGE_SIZE = 500
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;q=0.9"
"""Ask for a list's metadata only (a server that cannot answer so sends the whole list)."""
DEFAULT_TIMEOUT = 30.0
"""Seconds an API call may take when no timeout is given: every call has one."""
CONNECT_TIMEOUT = 10.0
WATCH_SECONDS = 60
"""How long the API server keeps one watch open (``timeoutSeconds``); the watch is then re-opened from the last
resourceVersion seen, so a stream that stalls silently is noticed within this window plus a margin."""
MAX_WATCH_LINE = 64 * 1024 * 1024
"""The longest watch event accepted (an object is at most a few MiB; anything longer is a broken stream)."""


class WatchExpired(SourceError):
    """The watch's resourceVersion is too old (HTTP 410 Gone): re-list."""


class ConflictError(SourceError):
    """The object changed since it was read (HTTP 409)."""


class NotFoundError(SourceError):
    """The object does not exist (HTTP 404 on a named object)."""


@dataclass(frozen=True, slots=True)
class TLS:
    """kubectl's TLS flags, over what the kubeconfig says."""

    insecure_skip_verify: bool = False
    certificate_authority: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None
    server_name: str | None = None

    def applied(self, config: dict[str, Any]) -> dict[str, Any]:
        """A resolved one-context kubeconfig with these flags over its cluster and user, as kubectl applies them (the
        insecure flag drops the kubeconfig's CA; a file given replaces the inline data)."""
        cluster = dict(config["clusters"][0]["cluster"])
        user = dict(config["users"][0]["user"])
        if self.insecure_skip_verify:
            cluster["insecure-skip-tls-verify"] = True
            cluster.pop("certificate-authority", None)
            cluster.pop("certificate-authority-data", None)
        if self.certificate_authority:
            cluster["certificate-authority"] = self.certificate_authority
            cluster.pop("certificate-authority-data", None)
            cluster.pop("insecure-skip-tls-verify", None)
        if self.server_name:
            cluster["tls-server-name"] = self.server_name
        for flag, key in ((self.client_certificate, "client-certificate"), (self.client_key, "client-key")):
            if flag:
                user[key] = flag
                user.pop(f"{key}-data", None)
        return {
            **config,
            "clusters": [{**config["clusters"][0], "cluster": cluster}],
            "users": [{**config["users"][0], "user": user}],
        }

    def configure(self, configuration: Any) -> None:
        """The flags on a client configuration built without a kubeconfig (``--server``, or in a Pod)."""
        if self.insecure_skip_verify:
            configuration.verify_ssl = False
            configuration.ssl_ca_cert = None
        if self.certificate_authority:
            configuration.ssl_ca_cert = self.certificate_authority
        if self.client_certificate:
            configuration.cert_file = self.client_certificate
            configuration.key_file = self.client_key
        if self.server_name:
            configuration.tls_server_name = self.server_name


@dataclass(frozen=True, slots=True)
class Connection:
    """How to reach the API server, with kubectl's flags."""

    kubeconfig: str | None = None
    context: str | None = None
    request_timeout: float | None = None
    """Seconds one API call may take (connect and every read); :data:`DEFAULT_TIMEOUT` when None."""
    cluster: str | None = None
    user: str | None = None
    server: str | None = None
    token: str | None = None
    impersonate: str | None = None
    """``--as``: act as this user (the API server checks that the credentials may)."""
    impersonate_groups: tuple[str, ...] = ()
    """``--as-group``."""
    tls: TLS = TLS()
    field_manager: str = "gpuctl"
    """The manager every write names (``fieldManager``), as kubectl names its own: what audit logs and
    ``managedFields`` tell apart."""

    @property
    def from_kubeconfig(self) -> bool:
        """Whether a kubeconfig is read: one is named or selected from, or there is one to read — not for a bare
        ``--server`` (with ``--token``) on a machine without one, nor in a Pod (its service account)."""
        if any(v is not None for v in (self.kubeconfig, self.context, self.cluster, self.user)):
            return True
        from gpuctl.cluster.kubeconfig import kubeconfig_paths

        if any(p.exists() for p in kubeconfig_paths(None)):
            return True
        return not _in_cluster() and self.server is None

    def timeouts(self, read: float | None = None) -> tuple[float, float]:
        """``(connect, read)`` as the client applies them: it ignores a bare float, so a tuple is always passed."""
        total = self.request_timeout if self.request_timeout and self.request_timeout > 0 else DEFAULT_TIMEOUT
        return (min(CONNECT_TIMEOUT, total), read if read is not None else total)


def _api_description(kind: Kind) -> str:
    return f"{kind.plural}.{kind.group}" if kind.group else kind.plural


def _not_served(kind: Kind) -> str:
    if kind.group == "worker.gpustack.ai":
        return f"the {kind.kind} API is not served by this cluster: is the operator installed?"
    if kind.group == "kueue.x-k8s.io":
        return f"the Kueue {kind.kind} API is not served by this cluster: is Kueue installed?"
    return f"the {kind.kind} API is not served by this cluster"


class LiveSource:
    """Objects read from the API server named by a kubeconfig (or the in-cluster service account)."""

    def __init__(self, connection: Connection | None = None) -> None:
        self.connection = connection or Connection()
        self._client: Any = None
        self._server = ""
        self._tls_config: Any = None
        self._versions: dict[str, str] = {}

    # ------------------------------------------------------------------------------------------- connection

    def _api(self) -> Any:
        if self._client is not None:
            return self._client
        from gpuctl.cluster.clientpackages import client_packages

        client, config = client_packages()

        from gpuctl.cluster import kubeconfig

        c = self.connection
        configuration = client.Configuration()
        try:
            if not c.from_kubeconfig and c.server is None:
                config.load_incluster_config(client_configuration=configuration)
                c.tls.configure(configuration)
            elif c.from_kubeconfig and not self._flags_only():
                loaded = kubeconfig.load(c.kubeconfig)
                resolved = loaded.resolved(kubeconfig.Selection(c.kubeconfig, c.context, c.cluster, c.user))
                config.load_kube_config_from_dict(c.tls.applied(resolved), client_configuration=configuration)
            else:
                c.tls.configure(configuration)
        except (config.ConfigException, OSError, TypeError, ValueError, KeyError) as exc:
            where = c.kubeconfig or "the kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config)"
            raise SourceError(
                f"cannot use {where}: {str(exc).splitlines()[0]}; pass --kubeconfig or --context"
            ) from None
        if c.server:
            configuration.host = c.server
        if c.token:
            configuration.api_key = {"authorization": f"Bearer {c.token}"}
            configuration.api_key_prefix = {}
        self._server = str(configuration.host)
        self._tls_config = configuration
        if not configuration.verify_ssl:
            # Asked for (--insecure-skip-tls-verify, or the kubeconfig): kubectl says nothing of it either.
            import warnings

            from urllib3.exceptions import InsecureRequestWarning

            warnings.filterwarnings("ignore", category=InsecureRequestWarning)
        # Watches hold a connection each for their whole window: room for every kind's watch and the writes besides.
        configuration.connection_pool_maxsize = 32
        # One attempt per call, within its timeout: a retry would silently double it.
        configuration.retries = False
        api = client.ApiClient(configuration)
        if c.impersonate or c.impersonate_groups:
            api.rest_client.pool_manager = _Impersonating(
                api.rest_client.pool_manager, c.impersonate, c.impersonate_groups
            )
        self._client = api
        return self._client

    def _flags_only(self) -> bool:
        """``--server`` with a kubeconfig that selects no context (none current, no ``--context``): kubectl then
        connects with the flags alone."""
        from gpuctl.cluster import kubeconfig

        c = self.connection
        if not c.server or c.context:
            return False
        try:
            return not kubeconfig.load(c.kubeconfig).current
        except SourceError:
            return c.kubeconfig is None

    def default_namespace(self) -> str | None:
        """The namespace of the kubeconfig's selected context, as kubectl uses it for ``-n``."""
        from gpuctl.cluster import kubeconfig

        c = self.connection
        if not c.from_kubeconfig or self._flags_only():
            return None
        return kubeconfig.load(c.kubeconfig).namespace(kubeconfig.Selection(c.kubeconfig, c.context, c.cluster, c.user))

    def describe(self) -> str:
        self._api()
        return f"cluster {self._server}"

    def _request(self, method: str, path: str, **options: Any) -> Any:
        """One request (``_call``'s options: query, body, content_type, kind, name, accept, read_timeout), its JSON."""
        response = self._call(method, path, **options)
        try:
            data = response.data
        except Exception as exc:  # noqa: BLE001 - a read that fails mid-body is an unreachable server
            raise self._unreachable(exc) from None
        try:
            return json.loads(data) if data else None
        except ValueError:
            raise SourceError(f"the API server at {self._server} answered {path} with invalid JSON") from None

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        kind: Kind | None = None,
        name: str | None = None,
        read_timeout: float | None = None,
        accept: str = "application/json",
    ) -> Any:
        """One request on the client's raw path, with a real timeout; the urllib3 response, unread."""
        api = self._api()
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            response = _send(api, method, path, query or [], headers, body, self.connection.timeouts(read_timeout))
        except ApiException as exc:
            if not exc.status:  # the client's wrapping of a TLS failure: the connection never got an answer
                raise self._unreachable(exc) from None
            raise self._api_error(exc, method, path, kind, name) from None
        except Exception as exc:  # noqa: BLE001 - urllib3 and socket errors: the server cannot be reached
            raise self._unreachable(exc) from None
        return response[0] if isinstance(response, tuple) else response

    def _unreachable(self, exc: BaseException) -> SourceError:
        return SourceError(f"cannot reach the API server at {self._server}: {_cause(exc, self._tls_config)}")

    def _api_error(self, exc: Any, method: str, path: str, kind: Kind | None, name: str | None) -> SourceError:
        status = int(getattr(exc, "status", 0) or 0)
        message = ""
        try:
            message = json.loads(exc.body or "{}").get("message", "")
        except (AttributeError, TypeError, ValueError):
            message = _text(exc.body).strip()
        what = _api_description(kind) if kind else path
        verb = {
            "GET": "get" if name else "list",
            "PATCH": "patch",
            "POST": "create",
            "DELETE": "delete",
            "PUT": "update",
        }.get(method, method)
        if status == 403:
            return SourceError(
                f"forbidden: cannot {verb} {what}{f' {name}' if name else ''}: {message or 'the user lacks the permission'}"
            )
        if status == 401:
            return SourceError(
                f"unauthorized: the API server at {self._server} rejected the credentials; refresh the kubeconfig"
            )
        if status == 404 and name and f'"{name}" not found' in message:
            # The object is missing; a 404 without it ("the server could not find the requested resource") means the
            # API itself is not served at this version.
            return NotFoundError(message)
        if status == 404:
            return NotServedError(_not_served(kind) if kind else f"{path} is not served by this cluster")
        if status == 409:
            return ConflictError(message or f"{what} {name} changed since it was read")
        if status == 400 and method == "GET" and ("selector" in message or "field label" in message):
            return SelectorError(message)
        if status == 422 or status == 400:
            return RefusedError(f"the API server refused the {verb}: {message}")
        return SourceError(f"the API server answered {status} to {verb} {what}: {message or exc.reason}")

    # ------------------------------------------------------------------------------------------- reading

    def _paths(self, kind: Kind, namespace: str | None) -> Iterator[tuple[str, str]]:
        """Candidate collection paths, the primary version first."""
        versions = [self._versions.get(kind.kind, kind.version)]
        versions += [v for v in (kind.version, *kind.other_versions) if v not in versions]
        for version in versions:
            base = f"/api/{version}" if not kind.group else f"/apis/{kind.group}/{version}"
            scope = f"/namespaces/{namespace}" if kind.namespaced and namespace else ""
            yield version, f"{base}{scope}/{kind.plural}"

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        not_older_than: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every object (pages joined); see :meth:`list_pages`."""
        return [
            item
            for page in self.list_pages(
                kind,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                not_older_than=not_older_than,
            )
            for item in page.items
        ]

    def list_pages(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = PAGE_SIZE,
        accept: str = "application/json",
        not_older_than: str | None = None,
    ) -> Iterator[Page]:
        """The list page by page (``limit``/``continue``): each page's items and the list's resourceVersion, the point
        a watch resumes from. A page is decoded only when the caller asks for it, so a large list is never held whole.
        Selectors are sent to the server, after the same check a snapshot makes (so both refuse one alike).

        By default the read is consistent (as of now): served from the API server's watch cache once it has caught up
        with etcd, which right after a write takes it a progress notification (80-90 ms here). ``not_older_than``
        (a resourceVersion the caller has seen) asks for a state at least that recent instead, which the watch cache
        serves at once (``resourceVersionMatch=NotOlderThan``)."""
        if label_selector or field_selector:
            from gpuctl.cluster.selectors import selection

            selection(kind, label_selector, field_selector)
        first = True
        for version, path in self._paths(kind, namespace):
            try:
                for page in self._pages(kind, path, label_selector, field_selector, page_size, accept, not_older_than):
                    if first:
                        self._versions[kind.kind] = version
                        first = False
                    yield page
            except SourceError as exc:
                if first and str(exc) == _not_served(kind) and not isinstance(exc, NotFoundError):
                    continue
                raise
            if first:  # an empty list
                self._versions[kind.kind] = version
            return
        raise NotServedError(_not_served(kind))

    def _pages(
        self,
        kind: Kind,
        path: str,
        label_selector: str | None,
        field_selector: str | None,
        page_size: int,
        accept: str = "application/json",
        not_older_than: str | None = None,
    ) -> Iterator[Page]:
        token = ""
        while True:
            query = [("limit", str(page_size))]
            if token:
                query.append(("continue", token))
            elif not_older_than:
                query += [("resourceVersion", not_older_than), ("resourceVersionMatch", "NotOlderThan")]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            page = self._request("GET", path, query=query, kind=kind, accept=accept)
            if not isinstance(page, dict):
                raise SourceError(f"the API server answered a list of {_api_description(kind)} with no object")
            api_version = page.get("apiVersion", kind.api_version)
            items = page.get("items") or []
            for item in items:
                item.setdefault("kind", kind.kind)
                item.setdefault("apiVersion", api_version if kind.group else kind.version)
            meta = page.get("metadata") or {}
            yield Page(items, str(meta.get("resourceVersion") or ""))
            token = meta.get("continue") or ""
            if not token:
                return

    def names(self, kind: Kind) -> builtins.list[str]:
        """The names of a kind's objects, listed as metadata only (a ``PartialObjectMetadataList``, as kubectl lists
        for ``-o name``): a Node's metadata is a small part of the Node."""
        return [
            str((item.get("metadata") or {}).get("name") or "")
            for page in self.list_pages(kind, accept=METADATA_LIST)
            for item in page.items
        ]

    def watch(
        self,
        kind: Kind,
        resource_version: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = WATCH_SECONDS,
        opened: Callable[[Any], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Watch events from ``resource_version`` (with bookmarks) until the server ends the window.

        Each event is ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK, "object": {...}}``. A 410 (the version expired)
        raises :class:`WatchExpired`; a stream that stalls longer than the window plus a margin, or breaks, raises
        :class:`SourceError`. ``opened`` receives the response, so another thread can close it to stop the watch.
        """
        _, path = next(self._paths(kind, namespace))
        query = [("resourceVersion", resource_version)]
        response = self._call(
            "GET",
            path,
            query=self._watch_query(query, label_selector, field_selector, timeout_seconds),
            kind=kind,
            read_timeout=timeout_seconds + 15.0,
        )
        yield from self._events(kind, response, opened)

    def watch_list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = WATCH_SECONDS,
        opened: Callable[[Any], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The kind's objects streamed as a watch's initial events (``sendInitialEvents``, as client-go's reflector
        lists): each object as an ADDED event, then a BOOKMARK annotated ``k8s.io/initial-events-end: "true"`` carrying
        the list's resourceVersion, then the watch goes on until the window ends.

        The API server sends them from its watch cache one object at a time, where a paginated list of a custom
        resource is read from etcd page by page and costs the server several times as much. A server that does not
        stream lists refuses the request (:class:`~gpuctl.cluster.errors.RefusedError`: its ``WatchList`` feature
        off, or older than 1.27, which forbids ``resourceVersionMatch`` on a watch). A caller that stops reading
        early closes the stream (its connection cannot be reused)."""
        query = [("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan"), ("resourceVersion", "")]
        for version, path in self._paths(kind, namespace):
            try:
                response = self._call(
                    "GET",
                    path,
                    query=self._watch_query(query, label_selector, field_selector, timeout_seconds),
                    kind=kind,
                    read_timeout=timeout_seconds + 15.0,
                )
            except SourceError as exc:
                if str(exc) == _not_served(kind) and not isinstance(exc, NotFoundError):
                    continue
                raise
            self._versions[kind.kind] = version
            yield from self._events(kind, response, opened)
            return
        raise NotServedError(_not_served(kind))

    @staticmethod
    def _watch_query(
        query: builtins.list[tuple[str, str]],
        label_selector: str | None,
        field_selector: str | None,
        timeout_seconds: int,
    ) -> builtins.list[tuple[str, str]]:
        out = [("watch", "1"), ("allowWatchBookmarks", "true"), *query, ("timeoutSeconds", str(timeout_seconds))]
        if label_selector:
            out.append(("labelSelector", label_selector))
        if field_selector:
            out.append(("fieldSelector", field_selector))
        return out

    def _events(self, kind: Kind, response: Any, opened: Callable[[Any], None] | None) -> Iterator[dict[str, Any]]:
        """A watch response's events (an ERROR event raised), until its stream ends."""
        if opened is not None:
            opened(response)
        ended = False
        try:
            for line in _lines(response, self._unreachable):
                try:
                    event = json.loads(line)
                except ValueError:
                    raise SourceError(f"a watch of {_api_description(kind)} sent a line that is not JSON") from None
                if not isinstance(event, dict):
                    continue
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if int(status.get("code") or 0) == 410:
                        raise WatchExpired(str(status.get("message") or "resourceVersion too old"))
                    raise SourceError(f"a watch of {_api_description(kind)} failed: {status.get('message') or status}")
                yield event
            ended = True
        finally:
            if not ended:
                # Not read to its end (stopped early, or failed): the connection holds the rest of the stream.
                with contextlib.suppress(Exception):
                    response.close()
            response.release_conn()

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """One object, or None when it does not exist."""
        for version, path in self._paths(kind, namespace):
            try:
                obj = self._request("GET", f"{path}/{name}", kind=kind, name=name)
            except NotFoundError:
                return None
            except SourceError as exc:
                if str(exc) == _not_served(kind):
                    continue
                raise
            self._versions[kind.kind] = version
            result: dict[str, Any] = obj
            return result
        raise NotServedError(_not_served(kind))

    def pending_workloads(self, cluster_queue: str) -> builtins.list[dict[str, Any]] | None:
        """Kueue's own pending order for a ClusterQueue (its visibility API), or None where it is not served."""
        path = f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{cluster_queue}/pendingworkloads"
        try:
            data = self._request("GET", path, query=[("limit", "1000")])
        except NotFoundError:
            return None
        except SourceError as exc:
            text = str(exc)
            if "is not served" in text or "answered 503" in text or "forbidden" in text:
                return None
            raise
        items = (data or {}).get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else None

    def service_get(
        self,
        namespace: str,
        service: str,
        port: int,
        path: str,
        limit: int,
        *,
        query: builtins.list[tuple[str, str]] | None = None,
        scheme: str = "https",
        read_timeout: float | None = None,
    ) -> tuple[int, str]:
        """GET ``path`` (with ``query``) of a Service's port through the API server's proxy: the status and at most
        ``limit`` bytes of the body (a longer one is refused)."""
        api = self._api()  # first: it loads the client's packages as the request path needs them
        from kubernetes.client.exceptions import ApiException

        url = f"/api/v1/namespaces/{namespace}/services/{scheme}:{service}:{port}/proxy{path}"
        timeouts = self.connection.timeouts(read_timeout)
        try:
            response = _send(api, "GET", url, query or [], {"Accept": "*/*"}, None, timeouts)
        except ApiException as exc:
            return int(exc.status or 0), (_text(exc.body) or str(exc.reason or ""))[:limit]
        except Exception as exc:  # noqa: BLE001 - urllib3 and socket errors: the server cannot be reached
            raise self._unreachable(exc) from None
        response = response[0] if isinstance(response, tuple) else response
        try:
            body = response.read(limit + 1)
        except Exception as exc:  # noqa: BLE001 - a read that fails mid-body is an unreachable server
            raise self._unreachable(exc) from None
        finally:
            response.release_conn()
        if len(body) > limit:
            raise SourceError(f"{url} answered more than {limit} bytes")
        return int(response.status), body.decode("utf-8", "replace")

    # ------------------------------------------------------------------------------------------- writing

    def patch(
        self,
        kind: Kind,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        patch_type: str = "application/merge-patch+json",
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        """Patch one object. A merge patch carrying ``metadata.resourceVersion`` is refused with a conflict when the
        object moved; a server-side apply patch names its ``field_manager``."""
        _, path = next(self._paths(kind, namespace))
        query = [("dryRun", "All")] if dry_run else []
        query.append(("fieldManager", field_manager or self.connection.field_manager))
        if force:
            query.append(("force", "true"))
        url = f"{path}/{name}" + (f"/{subresource}" if subresource else "")
        result: dict[str, Any] = self._request(
            "PATCH", url, query=query, body=body, content_type=patch_type, kind=kind, name=name
        )
        return result

    def create(
        self,
        kind: Kind,
        body: dict[str, Any],
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        read_timeout: float | None = None,
    ) -> dict[str, Any]:
        _, path = next(self._paths(kind, namespace))
        query = [("dryRun", "All")] if dry_run else []
        query.append(("fieldManager", self.connection.field_manager))
        result: dict[str, Any] = self._request(
            "POST", path, query=query, body=body, content_type="application/json", kind=kind, read_timeout=read_timeout
        )
        return result

    def delete(self, kind: Kind, name: str, *, namespace: str | None = None, dry_run: bool = False) -> None:
        _, path = next(self._paths(kind, namespace))
        query = [("dryRun", "All")] if dry_run else []
        try:
            self._request("DELETE", f"{path}/{name}", query=query, kind=kind, name=name)
        except NotFoundError:
            return

    def ping(self, timeout: float) -> None:
        """Ask the API server the cheapest question (its version), waiting at most ``timeout`` seconds for the
        answer: a watching screen's sign of life."""
        response = self._call("GET", "/version", read_timeout=timeout)
        try:
            _ = response.data
        except Exception as exc:  # noqa: BLE001 - a read that fails mid-body is an unreachable server
            raise self._unreachable(exc) from None

    def server_version(self) -> str:
        data = self._request("GET", "/version")
        return str((data or {}).get("gitVersion", ""))


def _send(
    api: Any,
    method: str,
    path: str,
    query: list[tuple[str, str]],
    headers: dict[str, str],
    body: Any,
    timeout: Any,
) -> Any:
    """One request on the client's raw path, its response unread (urllib3's); ApiException for an error status.

    The client's 35 and 36 lines take the whole request in ``call_api``; the 37 line's generator splits it into
    ``param_serialize`` (URL, headers, auth) and a ``call_api`` that returns a wrapper and leaves errors to the
    caller."""
    if not hasattr(api, "param_serialize"):
        return api.call_api(
            path,
            method,
            query_params=query,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
    from kubernetes.client.exceptions import ApiException

    method, url, headers, body, post = api.param_serialize(
        method, path, query_params=query, header_params=headers, body=body, auth_settings=["BearerToken"]
    )
    wrapped = api.call_api(method, url, header_params=headers, body=body, post_params=post, _request_timeout=timeout)
    raw = wrapped.response
    if not 200 <= raw.status <= 299:
        wrapped.read()
        raise ApiException(http_resp=wrapped)
    return raw


def _text(body: object) -> str:
    """A response body as text: the client hands bytes or str, and a repr of bytes is no message."""
    if isinstance(body, bytes | bytearray):
        return bytes(body).decode("utf-8", "replace")
    return "" if body is None else str(body)


class _Impersonating:
    """The client's connection pool with kubectl's impersonation headers on every request (``Impersonate-Group``
    repeated once per group, which the client's plain header dict cannot carry)."""

    def __init__(self, pool: Any, user: str | None, groups: tuple[str, ...]) -> None:
        self._pool = pool
        self._user = user
        self._groups = groups

    def request(self, method: str, url: str, *args: Any, headers: Any = None, **kwargs: Any) -> Any:
        from urllib3 import HTTPHeaderDict

        merged = HTTPHeaderDict(headers or {})
        if self._user:
            merged["Impersonate-User"] = self._user
        for group in self._groups:
            merged.add("Impersonate-Group", group)
        return self._pool.request(method, url, *args, headers=merged, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


@dataclass(frozen=True, slots=True)
class Page:
    items: list[dict[str, Any]]
    resource_version: str
    """The list's resourceVersion (the same on every page of one list)."""


def _lines(response: Any, unreachable: Callable[[BaseException], SourceError]) -> Iterator[bytes]:
    """The lines of a streamed response, each bounded by :data:`MAX_WATCH_LINE` (read in one pass: a line spread over
    many chunks is joined once)."""
    parts: list[bytes] = []
    size = 0
    try:
        for chunk in response.stream(65536, decode_content=True):
            if b"\n" not in chunk:
                parts.append(chunk)
                size += len(chunk)
                if size > MAX_WATCH_LINE:
                    raise SourceError("a watch event is larger than 64 MiB: the stream is broken")
                continue
            lines = (b"".join(parts) + chunk if parts else chunk).split(b"\n")
            rest = lines.pop()
            parts, size = ([rest], len(rest)) if rest else ([], 0)
            for line in lines:
                if line.strip():
                    yield line
            if size > MAX_WATCH_LINE:
                raise SourceError("a watch event is larger than 64 MiB: the stream is broken")
    except SourceError:
        raise
    except Exception as exc:  # noqa: BLE001 - a read timeout, a reset or a closed stream
        raise unreachable(exc) from None
    rest = b"".join(parts)
    if rest.strip():
        yield rest


def _in_cluster() -> bool:
    import os

    return (
        bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        and not os.environ.get("KUBECONFIG")
        and not os.path.exists(os.path.expanduser("~/.kube/config"))
    )

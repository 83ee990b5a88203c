"""The options commands share, declared once: kubectl's connection flags (accepted before or after the subcommand),
the namespace and selector flags, and the output flags. A command decorated with :func:`source_options` receives one
:class:`~gpuctl.cli.source.SourceSpec`; one decorated with :func:`output_options` receives one
:class:`~gpuctl.cli.render.OutputSpec`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from gpuctl.cli.errors import UsageError, command_path
from gpuctl.cli.names import completer
from gpuctl.cli.source import SourceSpec, parse_duration

if TYPE_CHECKING:
    from gpuctl.core.versions import KueueVersion

F = TypeVar("F", bound=Callable[..., Any])


# ----------------------------------------------------------------------------------------------- the options

SnapshotOption = Annotated[
    str | None,
    typer.Option(
        "--snapshot",
        envvar="GPUCTL_SNAPSHOT",
        help="Read objects from snapshot files (a file or directory of YAML/JSON) instead of a cluster.",
        show_default=False,
    ),
]
KubeconfigOption = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig", help="Path to the kubeconfig file (default $KUBECONFIG or ~/.kube/config).", show_default=False
    ),
]
ContextOption = Annotated[
    list[str] | None,
    typer.Option(
        "--context",
        help="The kubeconfig context to use (views, partitions, queue and fragmentation take several).",
        show_default=False,
        autocompletion=completer("context"),
    ),
]
AllContextsOption = Annotated[
    bool, typer.Option("--all-contexts", help="Read every context of the kubeconfig, one cluster each.")
]
ByClusterOption = Annotated[
    bool, typer.Option("--by-cluster", help="With several clusters: one row per cluster instead of their sum.")
]
ClusterOption = Annotated[
    str | None, typer.Option("--cluster", help="The kubeconfig cluster to use.", show_default=False)
]
UserOption = Annotated[str | None, typer.Option("--user", help="The kubeconfig user to use.", show_default=False)]
ServerOption = Annotated[
    str | None, typer.Option("--server", "-s", help="The address of the API server.", show_default=False)
]
TokenOption = Annotated[
    str | None, typer.Option("--token", help="Bearer token for the API server.", show_default=False)
]
AsOption = Annotated[
    str | None, typer.Option("--as", help="Username to impersonate for the operation.", show_default=False)
]
AsGroupOption = Annotated[
    list[str] | None,
    typer.Option("--as-group", help="Group to impersonate (repeat for several).", show_default=False),
]
InsecureOption = Annotated[
    bool,
    typer.Option(
        "--insecure-skip-tls-verify",
        help="Do not check the server's certificate (its name and issuer): the connection is not secure.",
    ),
]
CertificateAuthorityOption = Annotated[
    str | None,
    typer.Option("--certificate-authority", help="Path to a CA certificate file for the server.", show_default=False),
]
ClientCertificateOption = Annotated[
    str | None,
    typer.Option("--client-certificate", help="Path to a client certificate file for TLS.", show_default=False),
]
ClientKeyOption = Annotated[
    str | None, typer.Option("--client-key", help="Path to a client key file for TLS.", show_default=False)
]
TLSServerNameOption = Annotated[
    str | None,
    typer.Option(
        "--tls-server-name",
        help="The server name to check the server's certificate against (default: the host of the server's address).",
        show_default=False,
    ),
]
TimeoutOption = Annotated[
    str | None,
    typer.Option(
        "--request-timeout",
        help="How long one API request may take (e.g. 10s, 1m; default 30s).",
        show_default=False,
    ),
]
WorkerEnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--worker-env",
        metavar="NAME=VALUE",
        help="A GPUSTACK_<MFR>_* setting of GPUStack's worker (its manufacturer overrides), repeatable; read from "
        "the worker's Deployment when not given.",
        show_default=False,
    ),
]
NamespaceOption = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        help="The namespace (default: the kubeconfig context's, else default).",
        show_default=False,
        autocompletion=completer("namespace"),
    ),
]
AllNamespacesOption = Annotated[bool, typer.Option("--all-namespaces", "-A", help="Every namespace.")]
SelectorOption = Annotated[
    str | None, typer.Option("--selector", "-l", help="Label selector (e.g. key=value,other!=x).", show_default=False)
]
FieldSelectorOption = Annotated[
    str | None,
    typer.Option(
        "--field-selector",
        help="Field selector, where the server supports it (e.g. metadata.name=x).",
        show_default=False,
    ),
]
OutputOption = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        help="table, wide, json, yaml, name, csv (where a list has one), jsonpath=TEMPLATE, jsonpath-file=FILE, custom-columns=SPEC, custom-columns-file=FILE.",
        autocompletion=lambda: ["table", "wide", "json", "yaml", "name", "csv", "jsonpath=", "custom-columns="],
    ),
]
SortByOption = Annotated[
    str | None,
    typer.Option("--sort-by", help="Sort the list by a JSONPath expression (e.g. .remaining).", show_default=False),
]
NoHeadersOption = Annotated[bool, typer.Option("--no-headers", help="Print tables without their header row.")]
AllowMissingOption = Annotated[
    bool,
    typer.Option(
        "--allow-missing-template-keys/--no-allow-missing-template-keys",
        help="With -o jsonpath: a key the data lacks prints nothing (else it is an error).",
    ),
]
ShowLabelsOption = Annotated[bool, typer.Option("--show-labels", help="Add a LABELS column to tables.")]


WaitTimeoutOption = Annotated[
    str, typer.Option("--timeout", help="How long to wait with --wait: a duration such as 90s or 10m.")
]
"""--timeout of the waiting writes; read with ``wait_seconds``."""


KueueVersionOption = Annotated[
    str | None,
    typer.Option(
        "--kueue-version",
        help="Decide as this Kueue release would (e.g. 0.17, v0.19.2) instead of the one the cluster or snapshot "
        "tells (its manager's image, the dump's record, its CRDs).",
        show_default=False,
    ),
]
"""A what-if's Kueue; read with ``kueue_version``."""


def kueue_version(text: str | None) -> KueueVersion | None:
    """``--kueue-version``: the Kueue whose decisions to reproduce, in place of the one the source tells."""
    from gpuctl.core.versions import KueueVersion, parse_version

    if text is None:
        return None
    parsed = parse_version(text) if text.lstrip("v")[:1].isdigit() else None
    if parsed is None:
        raise UsageError(f"--kueue-version {text!r}: give a Kueue release such as 0.17 or v0.19.2")
    return KueueVersion(parsed, "--kueue-version")


def wait_seconds(text: str) -> float:
    seconds = parse_duration(text, "--timeout")
    if seconds < 1:
        raise UsageError(f"--timeout {text!r}: wait at least 1s")
    return seconds


CONNECTION = (
    ("snapshot", SnapshotOption, None),
    ("kubeconfig", KubeconfigOption, None),
    ("context", ContextOption, None),
    ("cluster", ClusterOption, None),
    ("user", UserOption, None),
    ("server", ServerOption, None),
    ("token", TokenOption, None),
    ("as_user", AsOption, None),
    ("as_groups", AsGroupOption, None),
    ("insecure_skip_tls_verify", InsecureOption, False),
    ("certificate_authority", CertificateAuthorityOption, None),
    ("client_certificate", ClientCertificateOption, None),
    ("client_key", ClientKeyOption, None),
    ("tls_server_name", TLSServerNameOption, None),
    ("request_timeout", TimeoutOption, None),
    ("worker_env", WorkerEnvOption, None),
)
NAMESPACED = (("namespace", NamespaceOption, None), ("all_namespaces", AllNamespacesOption, False))
SELECTORS = (("selector", SelectorOption, None), ("field_selector", FieldSelectorOption, None))
FLEET = (("all_contexts", AllContextsOption, False), ("by_cluster", ByClusterOption, False))
GLOBAL = (*CONNECTION, *NAMESPACED, *SELECTORS, *FLEET)
"""What ``gpuctl`` takes before the subcommand: every connection and list flag (a subcommand that cannot honour one
refuses it)."""


_ROOT: dict[str, Any] = {}
"""The flags given before the subcommand in this invocation (set by the root callback, which runs every time)."""


def _root_values() -> dict[str, Any]:
    return _ROOT


def _with_parameters(fn: Callable[..., Any], drop: str, added: tuple[tuple[str, Any, Any], ...]) -> inspect.Signature:
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.name != drop]
    clash = {p.name for p in params} & {name for name, _, _ in added}
    if clash:
        raise TypeError(f"{fn.__name__}: parameters {sorted(clash)} clash with the shared options")
    params += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        for name, annotation, default in added
    ]
    return sig.replace(parameters=params)


def install(wrapper: Callable[..., Any], sig: inspect.Signature) -> None:
    """Give a wrapper the signature (and the annotations) Typer reads its parameters from."""
    wrapper.__signature__ = sig  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in sig.parameters.values()}


def source_options(
    *, namespaced: bool = False, namespace: bool = False, selectors: bool = False, fleet: bool = False
) -> Callable[[F], F]:
    """Give a command kubectl's connection and list flags as one ``source`` argument; a flag given before the
    subcommand applies when the subcommand does not repeat it.

    Every command takes them all, and refuses what it cannot honour with a usage error: ``-l``/``--field-selector``
    unless it lists (``selectors``), ``-A`` where it reads one namespace (``namespace``). ``-n`` and ``-A`` of a
    command that reads only cluster-scoped objects are ignored, as kubectl ignores them. A ``namespaced`` command
    reads ``-n`` or ``-A``; a ``fleet`` command also takes ``--context`` several times, ``--all-contexts`` and
    ``--by-cluster``."""
    added = CONNECTION + NAMESPACED + SELECTORS + (FLEET if fleet else ())
    names = [n for n, _, _ in added]

    def decorate(fn: F) -> F:
        sig = _with_parameters(fn, "source", added)

        @functools.wraps(fn)
        def wrapper(**kwargs: Any) -> Any:
            root = _root_values()
            values = {}
            for name in names:
                given = kwargs.pop(name, None)
                values[name] = given if given not in (None, False, []) else root.get(name, given)
            values["as_groups"] = tuple(values.get("as_groups") or ())
            values["worker_env"] = tuple(values.get("worker_env") or ())
            contexts = tuple(values.get("context") or ())
            if not fleet and (len(contexts) > 1 or root.get("all_contexts") or root.get("by_cluster")):
                raise UsageError(
                    f"{command_path()} reads one cluster: --context once; only views, partitions, queue and"
                    " fragmentation read several (--context more than once, --all-contexts, --by-cluster)"
                )
            if not selectors and (values.get("selector") or values.get("field_selector")):
                raise UsageError(
                    f"{command_path()} lists nothing to select: -l and --field-selector go with the commands that"
                    " list (views, workloads, instance list, ...)"
                )
            if namespace and not namespaced and values.get("all_namespaces"):
                raise UsageError(f"{command_path()} reads one namespace: give -n NAMESPACE, not -A")
            values["context"] = contexts[-1] if contexts else None
            values["contexts"] = contexts
            return fn(source=SourceSpec(**values), **kwargs)

        install(wrapper, sig)
        return wrapper  # type: ignore[return-value]

    return decorate


def output_options(*, sort: bool = True, labels: bool = False, default: str = "table") -> Callable[[F], F]:
    """Give a command ``-o`` (and ``--sort-by``, ``--no-headers``, ``--show-labels``) as one ``output`` argument."""
    added: tuple[tuple[str, Any, Any], ...] = (
        ("output_format", OutputOption, default),
        ("no_headers", NoHeadersOption, False),
        ("allow_missing", AllowMissingOption, True),
    )
    if sort:
        added += (("sort_by", SortByOption, None),)
    if labels:
        added += (("show_labels", ShowLabelsOption, False),)

    def decorate(fn: F) -> F:
        sig = _with_parameters(fn, "output", added)

        @functools.wraps(fn)
        def wrapper(**kwargs: Any) -> Any:
            from gpuctl.cli.render import parse_output

            spec = parse_output(
                kwargs.pop("output_format"),
                no_headers=kwargs.pop("no_headers", False),
                allow_missing=kwargs.pop("allow_missing", True),
                sort_by=kwargs.pop("sort_by", None),
                show_labels=kwargs.pop("show_labels", False),
            )
            return fn(output=spec, **kwargs)

        install(wrapper, sig)
        return wrapper  # type: ignore[return-value]

    return decorate


def global_options(fn: F) -> F:
    """The root callback's flags: stored for the subcommands (which may repeat them)."""
    sig = _with_parameters(fn, "", GLOBAL)
    names = [n for n, _, _ in GLOBAL]

    @functools.wraps(fn)
    def wrapper(ctx: typer.Context, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name, None) for name in names}
        _ROOT.clear()
        _ROOT.update({k: v for k, v in values.items() if v not in (None, [], ())})
        return fn(ctx, **kwargs)

    install(wrapper, sig)
    return wrapper  # type: ignore[return-value]

"""``gpuctl webhook dry-run KIND -f FILE``: what the admission webhooks do to a manifest, as an RFC 6902 patch."""

from typing import Annotated, Any

import typer

from gpuctl.cli import render
from gpuctl.cli.errors import AnswerNo, UsageError
from gpuctl.cli.registry import OutputFlags, SourceFlags, command, group
from gpuctl.cli.render import OutputSpec
from gpuctl.cli.source import SourceSpec
from gpuctl.cli.usecases import WebhookKind, read_manifest, webhook_context
from gpuctl.cluster import kinds
from gpuctl.core.compat import StrEnum

group(
    "webhook",
    summary="Run the admission webhooks without storing anything.",
    help="Run the admission webhooks locally (or on the cluster) without storing anything.",
    examples="""
  gpuctl webhook dry-run pod -f pod.yaml""",
    listed=160,
)


class Operation(StrEnum):
    CREATE = "CREATE"
    UPDATE = "UPDATE"


_KINDS = {
    WebhookKind.POD: kinds.POD,
    WebhookKind.WORKLOAD: kinds.WORKLOAD,
    WebhookKind.INSTANCETYPE: kinds.INSTANCETYPE,
    WebhookKind.INSTANCE: kinds.INSTANCE,
}
SERVER_NOISE = (
    "/metadata/uid",
    "/metadata/creationTimestamp",
    "/metadata/resourceVersion",
    "/metadata/generation",
    "/metadata/managedFields",
    "/status",
)


def _result(
    allowed: bool, message: str | None, warnings: list[str], patch: list[dict[str, Any]], obj: dict[str, Any] | None
) -> dict[str, Any]:
    return {"allowed": allowed, "message": message, "warnings": warnings, "patch": patch, "object": obj}


def _server_dry_run(source: Any, kind: WebhookKind, obj: dict[str, Any]) -> dict[str, Any]:
    """Create with ``dryRun=All``: the deployed webhooks answer; nothing is stored."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import SourceError
    from gpuctl.cluster.live import ConflictError, LiveSource
    from gpuctl.core.admission import json_patch

    if not isinstance(source, LiveSource):
        raise UsageError("--server-side needs a live cluster, not a snapshot")
    k = {"pod": kinds.POD, "workload": kinds.WORKLOAD, "instancetype": kinds.INSTANCETYPE, "instance": kinds.INSTANCE}[
        kind.value
    ]
    namespace = (obj.get("metadata") or {}).get("namespace") or "default" if k.namespaced else None
    body = dict(obj)
    body.setdefault("apiVersion", k.api_version)
    renamed = ""
    try:
        try:
            stored = source.create(k, body, namespace=namespace, dry_run=True)
        except ConflictError as exc:
            meta = dict(body.get("metadata") or {})
            name = str(meta.get("name") or "")
            if "already exists" not in str(exc) or not name:
                raise
            # A dry-run create of an object that exists is refused before any webhook sees it; the same object
            # under a generated name reaches them, and their answer does not depend on the name.
            meta.pop("name")
            meta["generateName"] = f"{name}-"
            stored = source.create(k, {**body, "metadata": meta}, namespace=namespace, dry_run=True)
            renamed = name
    except SourceError as exc:
        text = str(exc)
        if "denied the request: " in text:
            return _result(False, text.split("denied the request: ", 1)[1], [], [], None)
        if "the API server refused the create: " in text:
            return _result(False, text.split("the API server refused the create: ", 1)[1], [], [], None)
        raise
    if renamed:
        stored = {**stored, "metadata": {**(stored.get("metadata") or {}), "name": renamed}}
        stored["metadata"].pop("generateName", None)
    patch = [op for op in json_patch(obj, stored) if not op["path"].startswith(SERVER_NOISE)]
    warnings = (
        [
            f"{k.kind} {namespace + '/' if namespace else ''}{renamed} exists: it was reviewed as a new one (generateName)"
        ]
        if renamed
        else []
    )
    return _result(True, None, warnings, patch, stored)


def _resolve(pointer: str, obj: Any) -> tuple[bool, Any]:
    current = obj
    for raw in pointer.lstrip("/").split("/") if pointer else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return False, None
    return True, current


def _same_value(a: Any, b: Any) -> bool:
    """Equal, or the same Kubernetes quantity (the API server stores ``800000`` as ``800k``)."""
    if a == b:
        return True
    if isinstance(a, str) and isinstance(b, str):
        from gpuctl.core.units import QuantityError, parse_quantity

        try:
            return parse_quantity(a) == parse_quantity(b)
        except QuantityError:
            return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return False


def compare(local: dict[str, Any], server: dict[str, Any]) -> list[str]:
    """Where the deployed webhooks and this version disagree (empty when they agree)."""
    if local["allowed"] != server["allowed"]:
        return [
            f"this version {'allows' if local['allowed'] else 'denies'} the object, the cluster {'allows' if server['allowed'] else 'denies'} it"
            + (f": {server['message']}" if server["message"] else "")
        ]
    if not local["allowed"]:
        return (
            []
            if local["message"] == server["message"]
            else [
                f"both deny, with different messages: here {local['message']!r}, on the cluster {server['message']!r}"
            ]
        )
    out = []
    for op in local["patch"]:
        found, value = _resolve(op["path"], server["object"])
        if op["op"] == "remove":
            if found:
                out.append(f"{op['path']}: removed here, kept on the cluster")
        elif not found:
            out.append(f"{op['path']}: set here to {op.get('value')!r}, absent on the cluster")
        elif not _same_value(value, op.get("value")):
            out.append(f"{op['path']}: {op.get('value')!r} here, {value!r} on the cluster")
    return out


@command(
    "webhook dry-run",
    summary="Show what the webhooks do to a manifest.",
    examples="""
  # What the Pod webhook does to a manifest (exit 3 when denied)
  gpuctl webhook dry-run pod -f pod.yaml

  # Ask the deployed webhooks too, and whether they agree with this version
  gpuctl webhook dry-run pod -f pod.yaml --server-side --compare

  # Replay an update of an Instance
  gpuctl webhook dry-run instance -f new.yaml --old stored.yaml --operation UPDATE""",
    source=SourceFlags(),
    output=OutputFlags(sort=False),
)
def dry_run_command(
    kind: Annotated[WebhookKind, typer.Argument(help="The kind of object.")],
    filename: Annotated[str, typer.Option("--filename", "-f", help="The manifest (YAML or JSON); - reads stdin.")],
    old: Annotated[
        str | None, typer.Option("--old", help="The stored object, for --operation UPDATE.", show_default=False)
    ] = None,
    operation: Annotated[
        Operation, typer.Option("--operation", help="The admission operation.", case_sensitive=False)
    ] = Operation.CREATE,
    server_side: Annotated[
        bool, typer.Option("--server-side", help="Send a server-side dry-run create: the deployed webhooks answer.")
    ] = False,
    compare_flag: Annotated[
        bool, typer.Option("--compare", help="With --server-side: do the deployed webhooks and this version agree?")
    ] = False,
    show_object: Annotated[bool, typer.Option("--show-object", help="Print the mutated object too.")] = False,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """What the webhooks do to a manifest: verdict, message, RFC 6902 patch (exit 3 when denied).

    The webhooks run here, with their context (the InstanceType behind a queue name, the pool's profiles, the
    KV-cache binding) read from the cluster or --snapshot. A Pod with both the queue-name and the KV-cache inject
    labels goes through both webhooks, as on the cluster.
    """
    from gpuctl.core.admission import json_patch
    from gpuctl.core.webhooks import Kind, review

    if operation is Operation.UPDATE and old is None:
        raise UsageError("--operation UPDATE needs --old FILE (the stored object)")
    if old is not None and operation is not Operation.UPDATE:
        raise UsageError("--old goes with --operation UPDATE")
    if compare_flag and not server_side:
        raise UsageError("--compare goes with --server-side")
    if server_side and operation is Operation.UPDATE:
        raise UsageError("--server-side sends a dry-run create: it cannot replay an UPDATE")
    obj = read_manifest(filename, kind)
    old_obj = read_manifest(old, kind) if old else None
    if not server_side:  # a server-side dry-run hears the refusal from the API server itself
        from gpuctl.core.apivalidation import refusal

        if (refused := refusal(obj)) is not None:
            raise UsageError(f"{filename}: {refused}")
    opened = source.live() if server_side else source.open()
    local: dict[str, Any] | None = None
    if not server_side or compare_flag:
        ctx = webhook_context(opened, kind, obj)
        admission = review(Kind(kind.value), operation.value, obj, old_obj, ctx)
        local = _result(
            admission.allowed,
            admission.message,
            list(admission.warnings),
            json_patch(obj, admission.mutated, admission.changed) if admission.allowed else [],
            admission.mutated,
        )
    result = local
    disagreements: list[str] = []
    if server_side:
        result = _server_dry_run(opened, kind, obj)
        if compare_flag and local is not None:
            disagreements = compare(local, result)
            result = {**result, "agrees": not disagreements, "differences": disagreements}
    assert result is not None
    from gpuctl.cli.refs import of_object

    render.emit_object(
        result,
        output,
        lambda: _human(kind, obj, result, show_object, compare_flag),
        ref=of_object(_KINDS[kind], obj),
    )
    if not result["allowed"] or disagreements:
        raise AnswerNo("")


def _human(kind: WebhookKind, obj: dict[str, Any], result: dict[str, Any], show_object: bool, compared: bool) -> str:
    import io
    import json

    meta = obj.get("metadata") or {}
    name = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
    out = io.StringIO()
    if not result["allowed"]:
        out.write(f"{kind.value} {name}: denied\n  {result['message']}\n")
    else:
        out.write(
            f"{kind.value} {name}: allowed"
            + (" unchanged\n" if not result["patch"] else f", {len(result['patch'])} change(s):\n")
        )
        for op in result["patch"]:
            value = "" if op["op"] == "remove" else " " + json.dumps(op.get("value"))
            out.write(f"  {op['op']:<7} {op['path']}{value}\n")
    for w in result.get("warnings") or []:
        out.write(f"  warning: {w}\n")
    if compared:
        out.write(
            "deployed webhooks agree with this version\n"
            if result.get("agrees")
            else "deployed webhooks DISAGREE with this version:\n"
        )
        for d in result.get("differences") or []:
            out.write(f"  - {d}\n")
    if show_object and result.get("object") is not None:
        render.print_yaml(result["object"], stream=out)
    return out.getvalue()

"""The answer every webhook rule gives, field errors in Kubernetes' wording, and the one JSON-patch builder.

A webhook rule is a function ``(request object, context records) -> Admission``. The RFC 6902 patch is always
``json_patch(original, admission.mutated, admission.changed)``, so the CLI's dry-run and the operator's webhook answer
the same bytes. A rule names the paths it may have changed; the patch compares only those subtrees, so a review's
time and memory follow what the rule touched, not the size of the object.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec

JSON = dict[str, Any]
Path = tuple[str | int, ...]
"""A location in a JSON object: keys and list indexes from the root (``()`` is the whole object)."""


@dataclass(frozen=True, slots=True)
class Admission:
    """A webhook's verdict: allowed or not, why, and the object as the webhook leaves it."""

    allowed: bool
    message: str | None = None
    mutated: JSON | None = None
    """The object after mutation; None when the rule does not mutate (or denies)."""
    warnings: tuple[str, ...] = field(default_factory=tuple)
    changed: tuple[Path, ...] | None = None
    """The subtrees the rule may have changed (the patch compares only those); None: anywhere."""
    error: str | None = None
    """An internal error's detail, for the operator's log: the message and warnings name only its type (they are
    sent back to the client, and an exception's text may quote the request)."""


def allow(
    mutated: JSON | None = None,
    *,
    message: str | None = None,
    warnings: Sequence[str] = (),
    changed: Sequence[Path] | None = None,
) -> Admission:
    return Admission(True, message, mutated, tuple(warnings), None if changed is None else tuple(changed))


def deny(message: str, *, warnings: Sequence[str] = ()) -> Admission:
    return Admission(False, message, None, tuple(warnings))


_MISSING: Any = object()


def _at(obj: Any, path: Path) -> Any:
    for part in path:
        if isinstance(obj, dict) and isinstance(part, str):
            obj = obj.get(part, _MISSING)
        elif isinstance(obj, list) and isinstance(part, int) and 0 <= part < len(obj):
            obj = obj[part]
        else:
            return _MISSING
        if obj is _MISSING:
            return _MISSING
    return obj


def _pointer(path: Path) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _diff(a: Any, b: Any, path: Path, ops: list[JSON]) -> None:
    if a is b:
        return
    if b is _MISSING:
        ops.append({"op": "remove", "path": _pointer(path)})
        return
    if a is _MISSING:
        ops.append({"op": "add", "path": _pointer(path), "value": b})
        return
    if type(a) is type(b) and a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k not in b:
                ops.append({"op": "remove", "path": _pointer((*path, k))})
        for k, v in b.items():
            _diff(a.get(k, _MISSING), v, (*path, k), ops)
        return
    if isinstance(a, list) and isinstance(b, list) and len(b) >= len(a):
        for i, v in enumerate(b):
            _diff(a[i] if i < len(a) else _MISSING, v, (*path, i), ops)
        return
    ops.append({"op": "replace", "path": _pointer(path), "value": b})


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """The paths none of which lies inside another, in their first-seen order."""
    unique = list(dict.fromkeys(paths))
    return [p for p in unique if not any(q != p and p[: len(q)] == q for q in unique)]


def json_patch(original: JSON, mutated: JSON | None, changed: Sequence[Path] | None = None) -> list[JSON]:
    """The RFC 6902 operations that turn ``original`` into ``mutated`` (empty when nothing changed).

    Only the subtrees at ``changed`` are compared (the whole object when None): a key present in one and not the
    other is added or removed, a list that grew gets its new items added, anything else that differs is replaced at
    the deepest point where the two differ. Comparing is linear in the compared subtrees."""
    if mutated is None:
        return []
    ops: list[JSON] = []
    for path in _outermost(list(changed)) if changed is not None else [()]:
        _diff(_at(original, path), _at(mutated, path), path, ops)
    return ops


def apply_patch(original: JSON, ops: list[JSON]) -> JSON:
    """Apply RFC 6902 operations to a copy of ``original``."""
    import jsonpatch

    result: JSON = jsonpatch.apply_patch(original, ops, in_place=False)
    return result


def deep_copy(obj: JSON) -> JSON:
    """A deep copy of a JSON object (faster than copy.deepcopy for plain JSON)."""
    copied: JSON = json.loads(json.dumps(obj))
    return copied


# ----------------------------------------------------------------------------------------------- field errors


def _quote(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}"


def invalid(path: str, value: object, detail: str) -> str:
    return f"{path}: Invalid value: {_quote(value)}: {detail}"


def required(path: str, detail: str) -> str:
    return f"{path}: Required value: {detail}"


def not_supported(path: str, value: object, supported: Sequence[str]) -> str:
    return (
        f"{path}: Unsupported value: {_quote(value)}: supported values: {', '.join(json.dumps(s) for s in supported)}"
    )


def aggregate(errors: Sequence[str]) -> str:
    """Several field errors in one message, as Kubernetes aggregates them."""
    if len(errors) == 1:
        return errors[0]
    return "[" + ", ".join(errors) + "]"


# ----------------------------------------------------------------------------------------------- failure policy

P = ParamSpec("P")


def fail_closed(rule: Callable[P, Admission]) -> Callable[P, Admission]:
    """A rule registered ``failurePolicy: Fail``: an internal error denies, with a message, and never raises."""

    @functools.wraps(rule)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> Admission:
        try:
            return rule(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a webhook answers for any input
            return Admission(
                False, f"internal error in {rule.__name__}: {type(exc).__name__}", error=f"{type(exc).__name__}: {exc}"
            )

    return guarded


def fail_open(rule: Callable[P, Admission]) -> Callable[P, Admission]:
    """A rule registered ``failurePolicy: Ignore``: an internal error allows the object unchanged."""

    @functools.wraps(rule)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> Admission:
        try:
            return rule(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a webhook answers for any input
            return Admission(
                True, warnings=(f"{rule.__name__} skipped: {type(exc).__name__}",), error=f"{type(exc).__name__}: {exc}"
            )

    return guarded

"""The answer every webhook rule gives, field errors in Kubernetes' wording, and the one JSON-patch builder.

A webhook rule is a function ``(request object, context records) -> Admission``. The RFC 6902 patch is always
``json_patch(original, admission.mutated)``, so the CLI's dry-run and the operator's webhook answer the same bytes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Admission:
    """A webhook's verdict: allowed or not, why, and the object as the webhook leaves it."""

    allowed: bool
    message: str | None = None
    mutated: JSON | None = None
    """The object after mutation; None when the rule does not mutate (or denies)."""
    warnings: tuple[str, ...] = field(default_factory=tuple)


def allow(mutated: JSON | None = None, *, message: str | None = None, warnings: Sequence[str] = ()) -> Admission:
    return Admission(True, message, mutated, tuple(warnings))


def deny(message: str, *, warnings: Sequence[str] = ()) -> Admission:
    return Admission(False, message, None, tuple(warnings))


def json_patch(original: JSON, mutated: JSON | None) -> list[JSON]:
    """The RFC 6902 operations that turn ``original`` into ``mutated`` (empty when nothing changed)."""
    if mutated is None or mutated == original:
        return []
    import jsonpatch  # deferred: a pure library, but only webhook paths need it

    ops: list[JSON] = jsonpatch.make_patch(original, mutated).patch
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
            return deny(f"internal error in {rule.__name__}: {type(exc).__name__}: {exc}")

    return guarded


def fail_open(rule: Callable[P, Admission]) -> Callable[P, Admission]:
    """A rule registered ``failurePolicy: Ignore``: an internal error allows the object unchanged."""

    @functools.wraps(rule)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> Admission:
        try:
            return rule(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a webhook answers for any input
            return allow(warnings=[f"{rule.__name__} skipped: {type(exc).__name__}: {exc}"])

    return guarded

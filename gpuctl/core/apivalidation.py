"""What the API server refuses in a Pod, or in the Pod template of a Job, Deployment, StatefulSet or Workload, before
anything else judges it: :func:`refusal` gives the API server's own message, or None.

Two kinds of refusal, as the API server makes them:

- **decoding**: a quantity that is not one (``"two"``) stops the object from being read at all — ``Pod in version
  "v1" cannot be handled as a Pod: quantities must match the regular expression …``;
- **validation**: fields that read but are not allowed — a name that is not a DNS name, a missing container name or
  image, a duplicate container, a negative quantity, a fractional count of an extended resource (``1.5`` cards), a
  request of one without a limit or with a limit that differs — listed as ``<Kind> "<name>" is invalid: <field>:
  <problem>``, several in brackets.

Only what can be judged from the object alone is checked: nothing that needs the cluster (quota, admission, defaults
another controller adds)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from gpuctl.core.errors import InputError
from gpuctl.core.units import QuantityError, format_quantity, parse_quantity

QUANTITY_PATTERN: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
"""The pattern the API server names when a quantity cannot be decoded."""

_DNS1123_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

LABEL_MESSAGE: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end "
    "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MESSAGE: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)

API_KINDS: Final = {
    "Pod": ("v1", "Pod"),
    "Job": ("batch/v1", "Job.batch"),
    "Deployment": ("apps/v1", "Deployment.apps"),
    "StatefulSet": ("apps/v1", "StatefulSet.apps"),
}
"""The kinds whose Pod template the API server validates as a Pod's: version and the name its refusals use."""


@dataclass(frozen=True, slots=True)
class FieldError:
    """One refused field, written as the API server writes it."""

    path: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}: {self.text}"


class Undecodable(InputError, ValueError):
    """A value that stops the object from being decoded at all."""


def refusal(obj: Mapping[str, Any]) -> str | None:
    """The API server's message refusing ``obj`` (a Pod, Job, Deployment or StatefulSet), or None if it would store
    it as far as the object alone tells."""
    kind = obj.get("kind")
    if kind not in API_KINDS:
        return None
    version, qualified = API_KINDS[str(kind)]
    meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
    try:
        errors = _meta_errors(meta, "metadata")
        if kind == "Pod":
            errors += pod_spec_errors(spec, "spec", defaulted=True)
        else:
            errors += pod_spec_errors(_mapping(_mapping(spec.get("template")).get("spec")), "spec.template.spec")
    except Undecodable as exc:
        return f'{kind} in version "{version.rsplit("/", 1)[-1]}" cannot be handled as a {kind}: {exc}'
    if not errors:
        return None
    name = meta.get("name") or meta.get("generateName") or ""
    body = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(str(e) for e in errors) + "]"
    return f'{qualified} "{name}" is invalid: {body}'


def pod_spec_errors(spec: Mapping[str, Any], path: str, *, defaulted: bool = False) -> list[FieldError]:
    """The refused fields of a Pod spec at ``path`` (``spec``, ``spec.template.spec``); Undecodable where a quantity
    cannot be read. ``defaulted``: a Pod's own spec, whose missing requests the API server defaults to the limits
    before it validates (a template is validated as written)."""
    errors: list[FieldError] = []
    containers = spec.get("containers")
    if not isinstance(containers, Sequence) or isinstance(containers, str) or not containers:
        errors.append(FieldError(f"{path}.containers", "Required value"))
        containers = []
    seen: set[str] = set()
    for group, items in (("initContainers", spec.get("initContainers")), ("containers", containers)):
        if not isinstance(items, Sequence) or isinstance(items, str):
            continue
        for i, container in enumerate(items):
            if isinstance(container, Mapping):
                errors += _container_errors(container, f"{path}.{group}[{i}]", seen, defaulted)
    return errors


def _container_errors(container: Mapping[str, Any], path: str, seen: set[str], defaulted: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    name = container.get("name")
    if not name:
        errors.append(FieldError(f"{path}.name", "Required value"))
    elif not isinstance(name, str) or not _DNS1123_LABEL.match(name) or len(name) > 63:
        errors.append(FieldError(f"{path}.name", f"Invalid value: {_quoted(name)}: {LABEL_MESSAGE}"))
    elif name in seen:
        errors.append(FieldError(f"{path}.name", f"Duplicate value: {_quoted(name)}"))
    else:
        seen.add(name)
    if not container.get("image"):
        errors.append(FieldError(f"{path}.image", "Required value"))
    resources = container.get("resources")
    if isinstance(resources, Mapping):
        errors += resource_errors(resources, f"{path}.resources", defaulted=defaulted)
    return errors


def resource_errors(resources: Mapping[str, Any], path: str, *, defaulted: bool = False) -> list[FieldError]:
    """The refused fields of one container's ``resources`` (with ``defaulted``, once each missing request is its
    limit, as the API server defaults a Pod before it validates it): quantities that are negative, extended resources asked in fractions, an extended
    resource requested without a limit or with a request other than its limit."""
    limits = _quantities(resources.get("limits"))
    requests = _quantities(resources.get("requests"))
    if defaulted:  # a request not given is its limit
        requests = dict(sorted({**limits, **requests}.items()))
    errors: list[FieldError] = []
    for name, (value, written) in limits.items():
        errors += _quantity_errors(name, value, written, f"{path}.limits[{name}]")
    for name, (value, written) in requests.items():
        where = f"{path}.requests[{name}]"
        errors += _quantity_errors(name, value, written, where)
        if name in limits:
            limit, limit_written = limits[name]
            if value != limit and not _overcommit_allowed(name):
                errors.append(
                    FieldError(
                        f"{path}.requests",
                        f"Invalid value: {_quoted(_canonical(value, written))}: must be equal to {name} limit of "
                        f"{_canonical(limit, limit_written)}",
                    )
                )
            elif value > limit:
                errors.append(
                    FieldError(
                        where,
                        f"Invalid value: {_quoted(_canonical(value, written))}: must be less than or equal to "
                        f"{name} limit of {_canonical(limit, limit_written)}",
                    )
                )
        elif not _overcommit_allowed(name):
            errors.append(
                FieldError(f"{path}.limits", "Required value: Limit must be set for non overcommitable resources")
            )
    return errors


def _quantity_errors(name: str, value: Fraction, written: object, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    shown = _quoted(_canonical(value, written))
    if value < 0:
        errors.append(FieldError(path, f"Invalid value: {shown}: must be greater than or equal to 0"))
    if _extended(name) and value.denominator != 1:
        errors.append(FieldError(path, f"Invalid value: {shown}: must be an integer"))
    return errors


def _quantities(raw: object) -> dict[str, tuple[Fraction, object]]:
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, tuple[Fraction, object]] = {}
    for name, written in sorted(raw.items(), key=lambda item: str(item[0])):  # the API server lists them by name
        try:
            out[str(name)] = (parse_quantity(written), written)
        except QuantityError:
            raise Undecodable(f"quantities must match the regular expression '{QUANTITY_PATTERN}'") from None
    return out


def _native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _extended(name: str) -> bool:
    """An extended resource (``nvidia.com/gpu``): whole numbers only, never overcommitted."""
    if _native(name) or name.startswith("requests."):
        return False
    prefix, _, rest = name.partition("/")
    return bool(_DNS1123_SUBDOMAIN.match(prefix) and _QUALIFIED_NAME.match(rest))


def _overcommit_allowed(name: str) -> bool:
    return _native(name) and not name.startswith("hugepages-")


def _canonical(value: Fraction, written: object) -> str:
    """``value`` as the API server prints a quantity: in the format it was written in (binary, exponent, decimal)."""
    text = str(written).strip()
    if re.search(r"[KMGTPE]i$", text) and value.denominator == 1 and not -1024 < value < 1024:
        return format_quantity(value, binary=True)
    if re.search(r"[eE][+-]?[0-9]+$", text):
        return _exponent(value)
    return format_quantity(value)


def _exponent(value: Fraction) -> str:
    if value == 0:
        return "0"
    for exponent in range(18, -10, -3):
        scaled = value / Fraction(10) ** exponent
        if scaled.denominator == 1:
            return f"{scaled.numerator}" if exponent == 0 else f"{scaled.numerator}e{exponent}"
    return format_quantity(value)


def _meta_errors(meta: Mapping[str, Any], path: str) -> list[FieldError]:
    name = meta.get("name")
    if not name and not meta.get("generateName"):
        return [FieldError(f"{path}.name", "Required value: name or generateName is required")]
    if name and (not isinstance(name, str) or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name)):
        return [FieldError(f"{path}.name", f"Invalid value: {_quoted(name)}: {SUBDOMAIN_MESSAGE}")]
    return []


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _quoted(value: object) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'

"""Every error a person can act on derives from one base, and the CLI reads its exit code from it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import gpuctl
from gpuctl.cli.errors import AnswerNo, RuntimeFailure, UsageError, exit_code_of
from gpuctl.cluster.errors import NotFound, SelectorError, SourceError
from gpuctl.core.errors import GpuctlError, InputError
from gpuctl.core.fragmentation import parse_shape
from gpuctl.core.units import parse_quantity

INTERNAL = {
    # Control flow inside one module, never shown to a person.
    "gpuctl.core.ledger._Unusual",
    "gpuctl.cluster.probe._Unusable",
    # An AdmissionReview the operator answers with a denial itself.
    "gpuctl.operator.admission.MalformedReview",
}


def error_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(gpuctl.__path__, "gpuctl."):
        if info.name.endswith(("startup_table", "__main__")):
            continue
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == info.name:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [cls for name, cls in sorted(found.items()) if name not in INTERNAL]


def test_every_error_of_gpuctl_has_the_one_base() -> None:
    classes = error_classes()
    assert len(classes) > 15  # the walk found them
    assert [c.__qualname__ for c in classes if not issubclass(c, GpuctlError)] == []


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (RuntimeFailure("x"), 1),
        (UsageError("x"), 2),
        (AnswerNo(""), 3),
        (SourceError("x"), 1),
        (NotFound("x"), 1),
        (SelectorError("x"), 2),
        (InputError("x"), 2),
        (OSError("x"), 1),
        (RuntimeError("a bug"), None),
        (KeyError("a bug"), None),
    ],
)
def test_the_exit_code_is_the_errors_own(error: BaseException, code: int | None) -> None:
    assert exit_code_of(error) == code


def test_errors_raised_by_the_core_carry_their_kind() -> None:
    with pytest.raises(GpuctlError) as shape:
        parse_shape("ex=lots")
    assert exit_code_of(shape.value) == 2
    with pytest.raises(GpuctlError) as quantity:
        parse_quantity("64GB!")
    assert exit_code_of(quantity.value) == 1
    assert isinstance(quantity.value, ValueError)  # still a ValueError for callers that catch those

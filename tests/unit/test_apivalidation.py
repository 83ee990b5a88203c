"""The API server's refusals of a Pod or a Pod template, judged from the object alone (the integration suite holds
each message against the real API server)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpuctl.core.apivalidation import refusal


def pod(*containers: dict[str, Any], name: str = "p", init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def c(name: str = "c", **resources: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": resources}


def test_a_valid_pod_is_not_refused() -> None:
    assert refusal(pod(c(limits={"nvidia.com/gpu": "2", "cpu": "1500m", "memory": "1Gi"}))) is None
    assert refusal(pod(c(limits={"nvidia.com/gpu": 2}, requests={"nvidia.com/gpu": "2", "cpu": "100m"}))) is None
    assert refusal(pod(c(requests={"cpu": "2"}, limits={"cpu": "3"}))) is None  # cpu may be overcommitted


def test_each_refusal_names_the_field_as_the_api_server_does() -> None:
    assert refusal(pod(c(limits={"nvidia.com/gpu": "1e0"}, requests={"nvidia.com/gpu": "2"}))) == (
        'Pod "p" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must be '
        "equal to nvidia.com/gpu limit of 1"
    )
    assert refusal(pod(c(requests={"nvidia.com/gpu": "1"}))) == (
        'Pod "p" is invalid: spec.containers[0].resources.limits: Required value: Limit must be set for non '
        "overcommitable resources"
    )
    assert refusal(pod(c(requests={"cpu": "2"}, limits={"cpu": "1"}))) == (
        'Pod "p" is invalid: spec.containers[0].resources.requests[cpu]: Invalid value: "2": must be less than or '
        "equal to cpu limit of 1"
    )
    assert refusal(pod(c(), c())) == 'Pod "p" is invalid: spec.containers[1].name: Duplicate value: "c"'
    assert refusal(pod(c(), init=[c("i", requests={"memory": "-2Gi"})])) == (
        'Pod "p" is invalid: spec.initContainers[0].resources.requests[memory]: Invalid value: "-2Gi": must be '
        "greater than or equal to 0"
    )
    assert refusal(pod()) == 'Pod "p" is invalid: spec.containers: Required value'
    assert refusal({"kind": "Pod", "metadata": {}, "spec": {"containers": [c()]}}) == (
        'Pod "" is invalid: metadata.name: Required value: name or generateName is required'
    )


def test_several_faults_are_listed_in_brackets() -> None:
    got = refusal(pod({"name": "C"}))
    assert got is not None and got.startswith('Pod "p" is invalid: [spec.containers[0].name: Invalid value: "C": ')
    assert got.endswith(", spec.containers[0].image: Required value]")


def test_a_template_is_judged_at_its_path_under_the_kind_the_server_names() -> None:
    job = {
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"containers": [c(limits={"example.com/fpga": "0.5"})]}}},
    }
    # A template is validated as written (a Pod's missing requests are defaulted to its limits first).
    assert refusal(job) == (
        'Job.batch "j" is invalid: spec.template.spec.containers[0].resources.limits[example.com/fpga]: '
        'Invalid value: "500m": must be an integer'
    )
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["example.com/fpga"] = "many"
    assert refusal(job) == (
        'Job in version "v1" cannot be handled as a Job: quantities must match the regular expression '
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )
    assert refusal({"kind": "Workload", "metadata": {}, "spec": {}}) is None  # not a kind judged here


@given(st.integers(min_value=-(10**6), max_value=10**6))
def test_a_whole_number_of_cards_is_refused_exactly_when_negative(n: int) -> None:
    got = refusal(pod(c(limits={"nvidia.com/gpu": str(n)})))
    assert (got is None) == (n >= 0)
    if got is not None:
        assert got.endswith(": must be greater than or equal to 0]")  # the limit, and the request defaulted to it


@given(st.fractions(min_value=0, max_value=64, max_denominator=1000).filter(lambda f: f.denominator != 1))
def test_a_fraction_of_a_card_is_never_stored(f: Any) -> None:
    assert refusal(pod(c(limits={"nvidia.com/gpu": float(f)}))) is not None

"""Label and field selectors read and evaluated as the API server reads them (the kubectl contract suite compares
them with the server itself; these pin the cases a snapshot needs that the test cluster has no objects for)."""

from __future__ import annotations

import pytest

from gpuctl.cluster import kinds
from gpuctl.cluster.errors import SelectorError
from gpuctl.cluster.selectors import parse_field_selector, parse_selector, selection

LABELS = {"tier": "gold", "team": "a", "priority": "5", "gpu": ""}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("tier=gold", True),
        ("tier==gold", True),
        ("tier!=gold", False),
        ("nosuch!=x", True),  # != and notin also match an object without the label
        ("tier in (gold, silver)", True),
        ("tier notin (gold)", False),
        ("nosuch notin (x)", True),
        ("tier in ()", False),
        ("tier notin ()", True),
        ("tier", True),
        ("!tier", False),
        ("gpu=", True),
        ("gpu", True),
        ("priority>3", True),
        ("priority<3", False),
        ("tier>3", False),  # a value that is not a number is never greater nor smaller
        ("tier=gold,team=b", False),
        ("", True),
    ],
)
def test_label_selectors(selector: str, matches: bool) -> None:
    assert all(r.matches(LABELS) for r in parse_selector(selector)) is matches


@pytest.mark.parametrize(
    "selector",
    ["tier=gold=x", "tier in gold", "tier gold", "!", "tier,", ",tier", "-a=b", "x/y/z", "a>b", "tier in (a b)"],
)
def test_label_selectors_the_server_refuses(selector: str) -> None:
    with pytest.raises(SelectorError, match="label selector"):
        parse_selector(selector)


def test_field_selectors_on_the_fields_the_server_selects_each_kind_by() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"nodeName": "n1", "schedulerName": "default-scheduler", "hostNetwork": True},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.7"}]},
    }
    for text, expected in (
        ("spec.nodeName=n1", True),
        ("spec.nodeName!=n1", False),
        ("status.phase==Running,metadata.namespace=team-a", True),
        ("spec.hostNetwork=true", True),
        ("status.podIP=10.0.0.7", True),
        ("spec.restartPolicy=", True),  # unset reads as empty, as the server reads it
    ):
        assert selection(kinds.POD, field_selector=text).matches(pod) is expected, text
    node = {"metadata": {"name": "n1"}, "spec": {}}
    assert selection(kinds.NODE, field_selector="spec.unschedulable=false").matches(node)
    with pytest.raises(SelectorError, match=r"field label not supported: metadata\.namespace"):
        selection(kinds.NODE, field_selector="metadata.namespace=x")
    with pytest.raises(SelectorError, match=r"field label not supported: spec\.type"):
        selection(kinds.INSTANCE, field_selector="spec.type=x")
    assert parse_field_selector(r"metadata.name=a\,b")[0].value == "a,b"
    with pytest.raises(SelectorError, match="cannot read"):
        parse_field_selector("metadata.name")

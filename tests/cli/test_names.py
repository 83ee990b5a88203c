"""Name arguments in every form kubectl writes them, and the names `-o name` prints."""

from __future__ import annotations

import pytest

from gpuctl.cli.errors import UsageError
from gpuctl.cli.refs import ObjectRef, split_name
from gpuctl.cluster import kinds


@pytest.mark.parametrize(
    ("text", "accepted", "expected"),
    [
        ("a10g", (kinds.INSTANCETYPE,), (None, "a10g")),
        ("instancetype.worker.gpustack.ai/a10g", (kinds.INSTANCETYPE,), (None, "a10g")),
        ("instancetypes.worker.gpustack.ai/a10g", (kinds.INSTANCETYPE,), (None, "a10g")),
        ("instancetype/a10g", (kinds.INSTANCETYPE,), (None, "a10g")),
        ("instype/a10g", (kinds.INSTANCETYPE,), (None, "a10g")),
        ("workload.kueue.x-k8s.io/train", (kinds.WORKLOAD,), (None, "train")),
        ("team-a/train", (kinds.WORKLOAD,), ("team-a", "train")),
        # a namespaced kind's bare resource name reads as a namespace, as NAMESPACE/NAME always has
        ("workload/train", (kinds.WORKLOAD,), ("workload", "train")),
        ("node/a10g-1", (kinds.NODE, kinds.DEVICES), (None, "a10g-1")),
        ("devices.worker.gpustack.ai/a10g-1", (kinds.NODE, kinds.DEVICES), (None, "a10g-1")),
        ("clusterqueue.kueue.x-k8s.io/q", (kinds.CLUSTERQUEUE, kinds.INSTANCETYPE), (None, "q")),
    ],
)
def test_a_name_in_any_of_kubectls_forms(
    text: str, accepted: tuple[kinds.Kind, ...], expected: tuple[str | None, str]
) -> None:
    assert split_name(text, accepted, what="x") == expected


@pytest.mark.parametrize(
    ("text", "accepted", "message"),
    [
        ("workload.kueue.x-k8s.io/train", (kinds.INSTANCETYPE,), "hold takes InstanceTypes: workload.kueue"),
        ("node/a10g-1", (kinds.INSTANCETYPE,), "hold takes InstanceTypes"),
        ("team-a/a10g", (kinds.INSTANCETYPE,), "an InstanceType has no namespace"),
        ("bogus.example.com/x", (kinds.INSTANCETYPE,), "is not a kind gpuctl reads here"),
        ("instancetype.worker.gpustack.ai/a/b", (kinds.INSTANCETYPE,), "give the namespace with -n"),
        ("/x", (kinds.INSTANCETYPE,), "use NAME or instancetype.worker.gpustack.ai/NAME"),
    ],
)
def test_a_name_of_another_kind_or_shape_is_a_usage_error(
    text: str, accepted: tuple[kinds.Kind, ...], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        split_name(text, accepted, what="hold")


def test_names_and_metadata_as_kubectl_writes_them() -> None:
    ref = ObjectRef(kinds.WORKLOAD, "train", "team-a", {"team": "a"})
    assert ref.qualified == "workload.kueue.x-k8s.io/train"
    assert ref.metadata() == {"name": "train", "namespace": "team-a", "labels": {"team": "a"}}
    assert ObjectRef(kinds.NODE, "a10g-1").qualified == "node/a10g-1"
    assert ObjectRef(kinds.INSTANCETYPE, "a10g", "ignored").metadata() == {"name": "a10g", "labels": {}}

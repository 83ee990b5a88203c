"""``gpuctl doctor``: audit the deployed admission chain against the design; one line per finding, with the fix."""

import time
from typing import Annotated, Any

import typer

from gpuctl.cli import render
from gpuctl.cli.errors import AnswerNo
from gpuctl.cli.options import SourceSpec, output_options, source_options
from gpuctl.cli.render import Column, OutputSpec

COLUMNS = (Column("STATUS"), Column("CHECK"), Column("SAW"), Column("FIX"), Column("WHY", wide_only=True))


def doctor_command(
    retry_minutes: Annotated[
        int, typer.Option("--retry-minutes", min=1, help="Report Workloads the check has held at Retry for longer.")
    ] = 30,
    *,
    source: SourceSpec,
    output: OutputSpec,
) -> None:
    """Check the admission chain: the webhooks against this version's registry, the gpustack-node-devices
    AdmissionCheck, the accelerated queues, every pool (its entrance, queues, published views, Devices and fit labels)
    and stuck work; exit 3 when a check fails. Runs the same on a live cluster and on a dump attached to a ticket."""
    from gpuctl.cluster import kinds, read
    from gpuctl.cluster.bulk import bulk_allocation
    from gpuctl.core import doctor, naming
    from gpuctl.core.workloads import parse_local_queue

    opened = source.open()
    with bulk_allocation():
        check = read.admission_check(opened, naming.NODE_DEVICES_CHECK)
        queues = read.cluster_queues(opened)
        types = {t.name: t for t in read.instancetypes(opened)}
        findings = [
            *_webhook_findings(opened),
            doctor.admission_check(check),
            *doctor.queues(queues, types, check is not None and check.active),
            *doctor.pools(
                types,
                queues,
                [parse_local_queue(o) for o in opened.list(kinds.LOCALQUEUE)],
                read.devices(opened),
                {n.name: n for n in read.nodes(opened)},
            ),
            *doctor.stuck(read.workloads(opened), read.pods(opened), time.time(), retry_minutes),
        ]
    items: list[dict[str, Any]] = [f.to_dict() for f in findings]
    render.emit(
        render.Listing(
            "DoctorFinding",
            items,
            COLUMNS,
            lambda i: [i["status"], i["check"], i["saw"], i["fix"] or "-", i["why"] or "-"],
            lambda i: f"finding/{i['check']}",
        ),
        output,
    )
    if any(f.status == doctor.FAIL for f in findings):
        raise AnswerNo("")


def _webhook_findings(opened: Any) -> list[Any]:
    """The webhook audit, or one warning when the configurations cannot be read (a role without them)."""
    from gpuctl.cluster import kinds
    from gpuctl.cluster.errors import SourceError
    from gpuctl.core import doctor

    try:
        configs = [*opened.list(kinds.MUTATING_WEBHOOKS), *opened.list(kinds.VALIDATING_WEBHOOKS)]
    except SourceError as exc:
        return [
            doctor.Finding(
                "webhook",
                doctor.WARN,
                f"cannot read the webhook configurations: {exc}",
                "the webhooks hold gate 1 and the KV-cache and pool rules",
                "grant the gpuctl-view role (deploy/rbac/gpuctl-cli.yaml), which reads them",
            )
        ]
    return doctor.webhooks([e for c in configs for e in doctor.parse_webhook_configuration(c)])


doctor_command = source_options()(output_options(sort=False)(doctor_command))

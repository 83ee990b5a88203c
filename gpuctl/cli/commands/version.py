"""The cluster half of ``gpuctl version --show-cluster``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from gpuctl.cli.options import SourceSpec


def print_cluster_versions(spec: SourceSpec) -> None:
    from gpuctl.cluster.kinds import DEPLOYMENT
    from gpuctl.core.naming import OPERATOR_NAME, OPERATOR_NAMESPACE

    source = spec.live()
    typer.echo(f"server {source.server_version()}")
    deployment = source.get(DEPLOYMENT, OPERATOR_NAME, OPERATOR_NAMESPACE)
    if deployment is None:
        typer.echo(f"operator: not installed (no deployment {OPERATOR_NAMESPACE}/{OPERATOR_NAME})")
        return
    labels = (deployment.get("metadata") or {}).get("labels") or {}
    typer.echo(f"operator {labels.get('app.kubernetes.io/version', 'unknown')}")

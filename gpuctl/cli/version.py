"""The cluster half of ``gpuctl version --cluster``."""

from __future__ import annotations

import typer

from gpuctl.cli.errors import user_errors

OPERATOR_NAMESPACE = "gpuctl-system"
OPERATOR_DEPLOYMENT = "gpuctl-operator"


@user_errors
def print_cluster_versions(kubeconfig: str | None, context: str | None) -> None:
    from gpuctl.cluster.kinds import Kind
    from gpuctl.cluster.live import Connection, LiveSource

    source = LiveSource(Connection(kubeconfig, context))
    typer.echo(f"server {source.server_version()}")
    deployment = source.get(
        Kind("Deployment", "apps", "v1", "deployments", True), OPERATOR_DEPLOYMENT, OPERATOR_NAMESPACE
    )
    if deployment is None:
        typer.echo(f"operator: not installed (no deployment {OPERATOR_NAMESPACE}/{OPERATOR_DEPLOYMENT})")
        return
    labels = (deployment.get("metadata") or {}).get("labels") or {}
    typer.echo(f"operator {labels.get('app.kubernetes.io/version', 'unknown')}")

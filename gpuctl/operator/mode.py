"""The operator's two modes, by what the cluster runs."""

from typing import Final

STANDALONE: Final = "standalone"
"""In the place of GPUStack's worker, where none runs: the operator serves the webhooks and writes what it decides."""
COMPANION: Final = "companion"
"""Beside GPUStack's worker: the operator writes nothing the worker owns, and reports where what the worker published
differs from what it decides (:mod:`gpuctl.operator.shadow`)."""

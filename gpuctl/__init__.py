"""gpuctl: see what a Kueue-shared GPU pool can still give, and why a workload waits."""

__version__ = "0.1.0"

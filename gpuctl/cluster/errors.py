"""Errors the cluster layer reports to users: one line, naming what failed and how to fix it."""

from gpuctl.core.errors import EXIT_USAGE, GpuctlError


class SourceError(GpuctlError):
    """Objects could not be read (unreachable API, unreadable or malformed snapshot, missing API)."""


class NoKubeconfig(SourceError):
    """No kubeconfig file exists where one was looked for: nothing names a cluster."""


class NotServedError(SourceError):
    """The cluster does not serve an API (its CRD or its API group is not installed)."""


class NotFound(SourceError):
    """A named object does not exist (exit 1, as kubectl's NotFound)."""


class SelectorError(SourceError):
    """A label or field selector that cannot be read, or selects by a field the server cannot select by (exit 2)."""

    exit_code = EXIT_USAGE


class RefusedError(SourceError):
    """The API server refused a request as invalid (HTTP 400 or 422): what was asked is not served as asked."""

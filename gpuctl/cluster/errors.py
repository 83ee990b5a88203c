"""Errors the cluster layer reports to users: one line, naming what failed and how to fix it."""


class SourceError(Exception):
    """Objects could not be read (unreachable API, unreadable or malformed snapshot, missing API)."""


class SelectorError(SourceError):
    """A label selector that cannot be parsed."""

"""The errors a person can act on, with one base: each message is one line naming what is wrong and the fix, and its
class says what kind of answer it is, as the exit code a command ends with.

- ``GpuctlError`` (1): the work could not be done — a Devices object or a quantity that cannot be read, an
  unreachable API, a change refused by an object's state;
- ``InputError`` (2): input that does not fit — a request shape, a manifest, a scenario, a selector;
- the CLI adds its own answer "no" (3) on the same base.

Errors that are values (``ValueError``) stay ``ValueError`` too, so a caller that catches those still does.
"""

from __future__ import annotations

EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_NO = 3


class GpuctlError(Exception):
    """An error a user can act on (exit 1: the work could not be done)."""

    exit_code: int = EXIT_RUNTIME


class InputError(GpuctlError):
    """Input that does not fit: flags, arguments, manifests, shapes or selectors (exit 2)."""

    exit_code = EXIT_USAGE


def not_text(exc: UnicodeDecodeError, offset: int = 0) -> str:
    """What a decoding error means to a user, without the codec's name: the byte and where it is (``offset``: where
    the decoded bytes start in the file)."""
    bad = exc.object[exc.start : exc.start + 1] if isinstance(exc.object, bytes | bytearray) else b""
    byte = f"byte 0x{bad[0]:02x}" if bad else "a byte"
    return f"not UTF-8 text ({byte} at offset {offset + exc.start}); save it as UTF-8"

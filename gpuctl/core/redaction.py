"""What ``gpuctl dump`` redacts before a snapshot is attached to a ticket: credentials written inline in objects.

The rule (documented in docs/snapshot-format.md):

- every inline container ``env`` value (``valueFrom`` references are kept: they name a Secret, they are not one);
- in ``args`` and ``command``: the value of an option whose name looks like a credential (``--token=…``,
  ``--password …``), and any argument whose value looks like one;
- every ``annotations`` and ``labels`` value, at any depth (an object's own, a template's), whose key or value looks
  like a credential;
- the ``kubectl.kubernetes.io/last-applied-configuration`` annotation, whole (it repeats the object as applied).

A **name** looks like a credential when it contains, in any case and with ``-``, ``_`` or ``.`` anywhere between
words: password, passwd, passphrase, pwd, secret, token, api key, access key, private key, credential, auth (not
author), bearer, session key, client secret. A **value** looks like one when it holds a PEM private-key block, an
HTTP ``Bearer``/``Basic`` credential, a URL with userinfo (``https://user:pass@host``, ``https://token@host``), an
assignment to such a name (``password=…``, ``"token": "…"``), a JSON Web Token, or a cloud provider's key format
(AWS ``AKIA…``, GitHub ``ghp_…``, Slack ``xox…-``). A redacted value reads ``<redacted>``.

No key or value that gpuctl's commands read matches the rule (a test checks it), so a redacted dump answers as the
cluster did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

REDACTED: Final = "<redacted>"
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"

_SEP = r"[-_.\s]?"
_NAMES = (
    "password",
    "passwd",
    "passphrase",
    r"(?<![a-z])pwd(?![a-z])",
    "secret",
    "token",
    f"api{_SEP}key",
    f"access{_SEP}key",
    f"private{_SEP}key",
    f"session{_SEP}key",
    "credential",
    r"auth(?!or)",
    "bearer",
)
CREDENTIAL_NAME: Final = re.compile("|".join(f"(?:{n})" for n in _NAMES), re.IGNORECASE)
"""A key, an option or a variable name that says it holds a credential."""

CREDENTIAL_VALUE: Final = re.compile(
    "|".join(
        (
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----",
            r"(?i:\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,})",
            r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@]+@",
            rf"(?i:(?:{'|'.join(_NAMES)})[\"']?\s*[:=]\s*[\"']?[^\s\"',;&]{{2,}})",
            r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.",
            r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
            r"\bgh[pousr]_[A-Za-z0-9]{20,}",
            r"\bgithub_pat_[A-Za-z0-9_]{20,}",
            r"\bxox[abprs]-[A-Za-z0-9-]{8,}",
            r"\bsk-[A-Za-z0-9_-]{20,}",
        )
    )
)
"""A value that carries a credential whatever its key."""


def credential_name(name: str) -> bool:
    return CREDENTIAL_NAME.search(name) is not None


def credential_value(value: str) -> bool:
    return CREDENTIAL_VALUE.search(value) is not None


@dataclass
class Redactor:
    """Redacts objects by the rule above, counting what it replaced."""

    count: int = 0
    where: dict[str, int] = field(default_factory=dict)
    """Redacted values by rule: ``env``, ``args``, ``annotations``, ``labels``, ``last-applied``."""

    def _hit(self, rule: str) -> str:
        self.count += 1
        self.where[rule] = self.where.get(rule, 0) + 1
        return REDACTED

    def redact(self, value: Any) -> Any:
        """A copy of ``value`` with every credential the rule finds replaced by ``<redacted>``."""
        if isinstance(value, list):
            return [self.redact(v) for v in value]
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k == "env" and isinstance(v, list):
                out[k] = [self._env(e) for e in v]
            elif k in ("args", "command") and isinstance(v, list):
                out[k] = self._args(v)
            elif k in ("annotations", "labels") and isinstance(v, dict):
                out[k] = {a: self._metadata_value(k, a, b) for a, b in v.items()}
            else:
                out[k] = self.redact(v)
        return out

    def _env(self, entry: Any) -> Any:
        if isinstance(entry, dict) and isinstance(entry.get("value"), str):
            return {**entry, "value": self._hit("env")}
        return self.redact(entry)

    def _metadata_value(self, section: str, key: Any, value: Any) -> Any:
        if not isinstance(value, str) or value == REDACTED:
            return self.redact(value)
        if key == LAST_APPLIED:
            return self._hit("last-applied")
        if (isinstance(key, str) and credential_name(key)) or credential_value(value):
            return self._hit(section)
        return value

    def _args(self, args: list[Any]) -> list[Any]:
        """``--token=abc`` → ``--token=<redacted>``; ``--password abc`` → ``--password <redacted>``;
        ``DB_PASSWORD=abc`` → ``DB_PASSWORD=<redacted>``; an argument that carries a credential (a URL with userinfo,
        a bearer header) → ``<redacted>``, or ``--option=<redacted>``."""
        out: list[Any] = []
        hide_next = False
        for arg in args:
            if not isinstance(arg, str):
                hide_next = False
                out.append(arg)
                continue
            if hide_next and not arg.startswith("-"):
                hide_next = False
                out.append(self._hit("args"))
                continue
            hide_next = False
            name, sep, _ = arg.partition("=")
            if credential_name(name) and not credential_value(name) and (sep or arg.startswith("-")):
                if sep:
                    out.append(f"{name}={self._hit('args')}")
                else:
                    out.append(arg)
                    hide_next = True
            elif credential_value(arg):
                out.append(f"{name}={self._hit('args')}" if sep and not credential_value(name) else self._hit("args"))
            else:
                out.append(arg)
        return out

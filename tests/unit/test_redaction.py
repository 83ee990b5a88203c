"""The dump's redaction rule on a corpus: every spelling of a credential in an annotation, a label or an argument is
redacted and counted; what gpuctl reads, and ordinary metadata, is kept."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuctl.core import naming
from gpuctl.core.kvcache import keys as kvcache_keys
from gpuctl.core.redaction import LAST_APPLIED, REDACTED, Redactor, credential_name, credential_value

CREDENTIAL_KEYS = [
    "password",
    "Password",
    "PASSWORD",
    "db-password",
    "db_password",
    "dbPassword",
    "example.com/admin-password",
    "passwd",
    "mysql.passwd",
    "ssh-passphrase",
    "pwd",
    "db.pwd",
    "secret",
    "client-secret",
    "clientSecret",
    "example.com/webhook-secret",
    "token",
    "api-token",
    "accessToken",
    "example.com/refresh_token",
    "apikey",
    "api-key",
    "api_key",
    "apiKey",
    "API.KEY",
    "access-key",
    "accessKey",
    "aws_access_key_id",
    "private-key",
    "privateKey",
    "tls.private_key",
    "session-key",
    "credentials",
    "gcp-credential",
    "auth",
    "basic-auth",
    "oauth-config",
    "nginx.ingress.kubernetes.io/auth-url",
    "registry-auth",
    "bearer",
]
"""Keys whose value is redacted whatever it holds."""

CREDENTIAL_VALUES = [
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow...\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----\nMIIE...",
    "-----BEGIN EC PRIVATE KEY-----",
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----",
    "Bearer abcdef123456",
    "bearer eyJhbGciOiJIUzI1NiJ9.payload",
    "Authorization: Basic dXNlcjpwYXNzd29yZA==",
    "basic dXNlcjpwYXNz",
    "https://user:hunter2@registry.example.com/v2",
    "postgres://app:s3cret@db:5432/app",
    "redis://:hunter2@cache:6379/0",
    "https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/org/repo",
    "mongodb+srv://admin:pw@cluster0.example.net",
    "amqp://guest:guest@rabbit",
    "password=hunter2",
    "db_password = hunter2",
    "PASSWORD: hunter2",
    '{"password": "hunter2"}',
    "user=app;password=hunter2;host=db",
    "token=abc123",
    '{"apiKey":"k-123456"}',
    "secret: swordfish",
    "client_secret=xyz987",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "xoxb-123456789012-abcdefghijkl",
    "sk-abcdefghijklmnopqrstuvwxyz012345",
]
"""Values redacted whatever their key."""

KEPT = [
    (naming.LABEL_QUEUE_NAME, naming.queue_entrance("gpustack--nvidia-a10g-linux-amd64")),
    (naming.ANNOTATION_ALLOCATED, json.dumps([{"id": "GPU-0001", "units": 800000, "mode": 3}])),
    (naming.LABEL_HOSTNAME, "a10g-1"),
    (kvcache_keys.ANNOTATION_BINDING, "pool-a"),
    ("kubernetes.io/change-cause", "kubectl scale deployment web --replicas=3"),
    ("prometheus.io/port", "8080"),
    ("app.kubernetes.io/name", "web"),
    ("org.opencontainers.image.authors", "the web team"),
    ("example.com/repo", "git@github.com:org/repo.git"),
    ("example.com/docs", "https://example.com/docs?q=1#top"),
    ("description", "rotates its token daily"),
    ("example.com/mode", "authentication disabled"),
]
"""Ordinary metadata, and what gpuctl reads: kept."""


def test_the_corpus_has_at_least_fifty_spellings() -> None:
    assert len(CREDENTIAL_KEYS) + len(CREDENTIAL_VALUES) >= 50


@pytest.mark.parametrize("key", CREDENTIAL_KEYS)
@pytest.mark.parametrize("section", ["annotations", "labels"])
def test_a_value_under_a_credential_key_is_redacted(section: str, key: str) -> None:
    redactor = Redactor()
    obj = {"metadata": {section: {key: "hunter2", "team": "a"}}}
    out = redactor.redact(obj)
    assert out["metadata"][section] == {key: REDACTED, "team": "a"}
    assert redactor.count == 1 and redactor.where == {section: 1}
    assert obj["metadata"][section][key] == "hunter2"  # a copy: the object read is left as it was


@pytest.mark.parametrize("value", CREDENTIAL_VALUES)
def test_a_credential_value_is_redacted_under_any_key(value: str) -> None:
    redactor = Redactor()
    out = redactor.redact({"spec": {"template": {"metadata": {"annotations": {"example.com/config": value}}}}})
    assert out["spec"]["template"]["metadata"]["annotations"]["example.com/config"] == REDACTED
    assert redactor.count == 1


@pytest.mark.parametrize(("key", "value"), KEPT, ids=[k for k, _ in KEPT])
def test_ordinary_metadata_is_kept(key: str, value: str) -> None:
    redactor = Redactor()
    obj = {"metadata": {"annotations": {key: value}, "labels": {key: value}}}
    assert redactor.redact(obj) == obj and redactor.count == 0


def test_no_key_gpuctl_reads_looks_like_a_credential() -> None:
    read = [
        v
        for module in (naming, kvcache_keys)
        for name, v in vars(module).items()
        if name.startswith(("LABEL_", "ANNOTATION_")) and isinstance(v, str)
    ]
    assert len(read) > 15
    assert [k for k in read if credential_name(k)] == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--token=abc"], ["--token=<redacted>"]),
        (["--password", "hunter2", "--port", "80"], ["--password", "<redacted>", "--port", "80"]),
        (["--api-key=abc", "serve"], ["--api-key=<redacted>", "serve"]),
        (["DB_PASSWORD=hunter2"], ["DB_PASSWORD=<redacted>"]),
        (["--db-url=postgres://u:p@db/app"], ["--db-url=<redacted>"]),
        (["postgres://u:p@db/app"], ["<redacted>"]),
        (["-H", "Authorization: Bearer abcdefgh"], ["-H", "<redacted>"]),
        (["--token-file", "/var/run/token"], ["--token-file", "<redacted>"]),
        (["serve", "--port", "80", "--verbose"], ["serve", "--port", "80", "--verbose"]),
        (["--password", "--verbose"], ["--password", "--verbose"]),
    ],
)
def test_arguments(args: list[str], expected: list[str]) -> None:
    redactor = Redactor()
    assert redactor.redact({"args": args})["args"] == expected
    assert redactor.count == sum(a == REDACTED or a.endswith("=" + REDACTED) for a in expected)


def test_env_values_and_last_applied_are_redacted_and_counted_by_rule() -> None:
    redactor = Redactor()
    pod: dict[str, Any] = {
        "metadata": {"annotations": {LAST_APPLIED: '{"kind": "Pod"}', "example.com/db-password": "x"}},
        "spec": {
            "containers": [
                {
                    "env": [
                        {"name": "MODE", "value": "fast"},
                        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}},
                    ],
                    "args": ["--secret=x"],
                }
            ]
        },
    }
    out = redactor.redact(pod)
    assert out["metadata"]["annotations"] == {LAST_APPLIED: REDACTED, "example.com/db-password": REDACTED}
    env = out["spec"]["containers"][0]["env"]
    assert env[0]["value"] == REDACTED and env[1] == pod["spec"]["containers"][0]["env"][1]
    assert redactor.count == 4 and redactor.where == {"annotations": 1, "args": 1, "env": 1, "last-applied": 1}


def test_names_and_values_separately() -> None:
    assert credential_name("X-Api-Key") and not credential_name("kueue.x-k8s.io/queue-name")
    assert credential_value("ftp://anonymous@ftp.example.com") and not credential_value("https://example.com/a@b")

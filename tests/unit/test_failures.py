"""Connection failures in plain words: no Python or OpenSSL internals in what a user reads."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from types import SimpleNamespace

from gpuctl.cluster.failures import cause, plain


def test_internals_are_left_out() -> None:
    assert plain("[X509: NO_CERTIFICATE_OR_CRL_FOUND] no certificate or crl found (_ssl.c:4154)") == (
        "no certificate or crl found"
    )
    assert plain("_ssl.c:989: The handshake operation timed out") == "The handshake operation timed out"
    assert plain("[Errno 111] Connection refused") == "Connection refused"


def test_a_certificate_authority_file_without_a_certificate_is_named_with_its_fix(tmp_path: Path) -> None:
    """A real TLS client, loading a CA file that holds no certificate, against a local listener."""
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    try:
        ssl.create_default_context(cafile=str(bad))
    except ssl.SSLError as exc:
        error: BaseException = exc
    else:
        raise AssertionError("the CA file loaded")
    said = cause(error, SimpleNamespace(ssl_ca_cert=str(bad)))
    assert said == (
        f"the certificate-authority file {bad} holds no PEM certificate: point the kubeconfig's certificate-authority "
        "(or --certificate-authority) at the cluster's CA"
    )
    assert "_ssl.c" not in cause(error) and "[X509" not in cause(error)


def test_a_handshake_that_times_out_reads_without_internals() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)  # accepts, never speaks TLS
    try:
        with socket.create_connection(server.getsockname(), timeout=0.5) as raw:
            try:
                ssl.create_default_context().wrap_socket(raw, server_hostname="127.0.0.1")
            except (TimeoutError, ssl.SSLError, OSError) as exc:
                said = cause(exc)
            else:
                raise AssertionError("the handshake completed")
        assert "_ssl.c" not in said and said
    finally:
        server.close()

"""Why a connection to the API server failed, in a few words: urllib3's nested retry report reduced to its root
cause, and a certificate that does not verify named as kubectl (Go's x509 package) names it."""

from __future__ import annotations

import re
from typing import Any


def cause(exc: BaseException, configuration: Any = None) -> str:
    """The root cause of a failed connection in a few words (not urllib3's nested retry report); a certificate that
    does not verify is named as kubectl names it."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        following = getattr(current, "reason", None)
        if not isinstance(following, BaseException):
            following = current.__cause__ or current.__context__
        current = following
    names = [type(e).__name__ for e in seen]
    text = " ".join(str(e) for e in seen)
    if "ConnectTimeoutError" in names or "connect timeout" in text.lower():
        return "connect timed out (no answer from the address: a firewall, or the wrong host?)"
    if "ReadTimeoutError" in names or "read timed out" in text.lower():
        return "the server did not answer in time (--request-timeout)"
    if "Connection refused" in text:
        return "connection refused (nothing listens at that host and port)"
    if "Name or service not known" in text or "nodename nor servname" in text or "Temporary failure in name" in text:
        return "the host name does not resolve"
    import ssl

    failed = next((e for e in seen if isinstance(e, ssl.SSLCertVerificationError)), None)
    if failed is not None:
        return f"tls: failed to verify certificate: {_x509(failed, configuration)}"
    ca_file = getattr(configuration, "ssl_ca_cert", None)
    if ca_file and any(w in text for w in ("no certificate or crl found", "PEM lib", "NO_CERTIFICATE")):
        return (
            f"the certificate-authority file {ca_file} holds no PEM certificate: point the kubeconfig's "
            "certificate-authority (or --certificate-authority) at the cluster's CA"
        )
    if any("SSL" in n for n in names):
        return f"TLS failed: {_first_line(seen[-1])}"
    return _first_line(seen[-1])


X509_UNKNOWN_AUTHORITY = frozenset({2, 18, 19, 20, 21})
"""OpenSSL's verify codes for a chain no trusted CA signed (unable to get the issuer, self-signed, ...)."""


def _x509(exc: Any, configuration: Any) -> str:
    """An OpenSSL verification failure in Go's x509 words."""
    code = int(getattr(exc, "verify_code", 0) or 0)
    if code in X509_UNKNOWN_AUTHORITY:
        return "x509: certificate signed by unknown authority"
    if code in (9, 10):
        return "x509: certificate has expired or is not yet valid"
    if code in (62, 64) and configuration is not None:
        named = _hostname_mismatch(configuration)
        if named:
            return named
    return f"x509: {getattr(exc, 'verify_message', '') or _first_line(exc)}"


def _hostname_mismatch(configuration: Any) -> str | None:
    """Go's "certificate is valid for …, not …": the names the server's certificate holds, read by connecting again
    with the same trust but without the name check."""
    import ipaddress
    import socket
    import ssl
    from urllib.parse import urlsplit

    url = urlsplit(str(configuration.host))
    host, port = url.hostname or "", url.port or 443
    wanted = configuration.tls_server_name or host
    try:
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
        context.check_hostname = False
        if configuration.cert_file and configuration.key_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file)
        with (
            socket.create_connection((host, port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=wanted) as tls,
        ):
            cert = tls.getpeercert() or {}
    except (OSError, ValueError):
        return None
    sans: list[tuple[str, str]] = [
        (str(pair[0]), str(pair[1])) for pair in cert.get("subjectAltName") or () if len(pair) == 2
    ]
    try:
        ipaddress.ip_address(wanted)
        ips = [value for kind, value in sans if kind == "IP Address"]
        if not ips:
            return f"x509: cannot validate certificate for {wanted} because it doesn't contain any IP SANs"
        return f"x509: certificate is valid for {', '.join(ips)}, not {wanted}"
    except ValueError:
        dns = [value for kind, value in sans if kind == "DNS"]
        if not dns:
            return f"x509: certificate is not valid for any names, but wanted to match {wanted}"
        return f"x509: certificate is valid for {', '.join(dns)}, not {wanted}"


def _first_line(exc: BaseException) -> str:
    text = plain(str(exc)) or type(exc).__name__
    return text.splitlines()[0][:300]


_INTERNALS = re.compile(r"\s*\(_ssl\.c:\d+\)|_ssl\.c:\d+:\s*|\[(?:SSL|X509)(?::\s*[A-Z0-9_]+)?\]\s*|\[Errno -?\d+\]\s*")


def plain(text: str) -> str:
    """An error's words without the Python and OpenSSL internals around them (``_ssl.c:989``, ``[SSL: ...]``,
    ``[Errno 111]``): what a user reads is the reason, not where in the interpreter it was raised."""
    return _INTERNALS.sub(lambda m: " " if m.group(0).startswith(" ") else "", text).strip()

"""Per-run PKI for the integration control plane (Python ``cryptography``).

One RSA certificate authority signs everything: the kube-apiserver serving
certificate, client certificates (admin, Kueue) and webhook serving
certificates. The CA key is RSA/PKCS#1 because Kueue's certificate rotator
parses the CA key of its webhook Secret with ``x509.ParsePKCS1PrivateKey``.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Kueue's rotator treats its CA as valid only if the CA certificate carries
# this DNS name (it verifies the CA against itself with DNSName "kueue-ca").
KUEUE_CA_NAME = "kueue-ca"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _san(hosts) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


@dataclass
class KeyPair:
    cert: x509.Certificate
    key: object

    @property
    def cert_pem(self) -> bytes:
        return _cert_pem(self.cert)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)


class CertificateAuthority:
    """A throw-away CA valid for ten years (Kueue's rotator looks 90 days ahead)."""

    def __init__(self, common_name: str = "gpuctl-integration-ca") -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = _now()
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(_san([KUEUE_CA_NAME]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return _cert_pem(self.cert)

    @property
    def key_pem(self) -> bytes:
        """PKCS#1 ("RSA PRIVATE KEY") PEM."""
        return _key_pem(self.key)

    def _issue(self, subject: x509.Name, usage, hosts=(), days: int = 365) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if hosts:
            builder = builder.add_extension(_san(hosts), critical=False)
        return KeyPair(builder.sign(self.key, hashes.SHA256()), key)

    def serving_cert(self, hosts, common_name: str | None = None) -> KeyPair:
        """A TLS server certificate for ``hosts`` (DNS names and/or IP addresses)."""
        hosts = list(hosts)
        cn = common_name or hosts[0]
        return self._issue(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]),
            ExtendedKeyUsageOID.SERVER_AUTH,
            hosts,
        )

    def client_cert(self, user: str, groups=()) -> KeyPair:
        """A client certificate: CN is the user name, O entries are the groups."""
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
        return self._issue(x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH)


def service_account_keypair() -> tuple[bytes, bytes]:
    """(private PEM, public PEM) for service-account token signing (ES256)."""
    key = ec.generate_private_key(ec.SECP256R1())
    priv = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return priv, pub


def loopback_tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a loopback serving certificate (cert, key, CA)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (directory / "tls.crt", directory / "tls.key", directory / "ca.crt")
    paths[0].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    paths[2].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return paths

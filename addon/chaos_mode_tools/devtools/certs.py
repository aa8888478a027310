"""A throwaway certificate authority, and a server and a client certificate it signed: for the HTTPS tests
and the benchmark of a distant z.ai (`bench.cost.distance`).

The server certificate names `localhost` and 127.0.0.1 (the simulator binds loopback only); the client
certificate is one PEM file with its key, as mitmproxy's `client_certs` takes it. The files live in a
temporary folder of the caller's choosing. Built with `cryptography` (mitmproxy's dependency).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAMES = ("localhost",)
SERVER_IPS = ("127.0.0.1",)
CLIENT_NAME = "client.test"


@dataclass(frozen=True)
class TestCerts:
    ca: Path  # the authority's certificate (what ssl_verify_upstream_trusted_ca names)
    cert: Path  # the server's certificate
    key: Path  # the server's key
    client: Path  # a client certificate and its key, in one file

    __test__ = False  # not a test class, whatever pytest thinks of the name


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_certs(folder: Path, *, days: int = 2) -> TestCerts:
    """A CA, a server certificate for localhost / 127.0.0.1 and a client certificate, in `folder` (PEM)."""
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("chaos-mode test CA")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVER_NAMES]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVER_IPS]
    issue = _Issuer(ca_key, ca_name, ca_ski, start, end)
    key, cert = issue(SERVER_NAMES[0], ExtendedKeyUsageOID.SERVER_AUTH, names)
    client_key, client = issue(CLIENT_NAME, ExtendedKeyUsageOID.CLIENT_AUTH, [x509.DNSName(CLIENT_NAME)])
    folder.mkdir(parents=True, exist_ok=True)
    certs = TestCerts(
        folder / "ca.pem", folder / "server.pem", folder / "server-key.pem", folder / "client.pem"
    )
    certs.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    certs.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    certs.key.write_bytes(_pem_key(key))
    certs.client.write_bytes(_pem_key(client_key) + client.public_bytes(serialization.Encoding.PEM))
    return certs


@dataclass(frozen=True)
class _Issuer:
    """Signs end-entity certificates with the CA's key."""

    key: ec.EllipticCurvePrivateKey
    name: x509.Name
    ski: x509.SubjectKeyIdentifier
    start: datetime.datetime
    end: datetime.datetime

    def __call__(
        self, common: str, usage: x509.ObjectIdentifier, names: list[x509.GeneralName]
    ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.start)
            .not_valid_after(self.end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(self.ski), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        return key, cert


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )

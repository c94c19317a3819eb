"""Certificates for tests and benchmarks, made with ``cryptography`` (a test dependency,
imported when used): a CA, a server certificate for 127.0.0.1 / localhost, a client
certificate the CA signed, and a client certificate of a stranger CA. Valid from five minutes
ago for one day; EC P-256 keys, unencrypted PEM files in the directory given."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

__all__ = ["Pki", "make_pki"]


@dataclass
class Pki:
    """Paths of the PEM files (``server_cert`` names 127.0.0.1 and localhost)."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    rogue_cert: str
    rogue_key: str


def _name(cn: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hmb tests"), x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False, server: bool = False) -> x509.Certificate:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False, key_encipherment=False,
                                          data_encipherment=False, key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write(path: str, cert: x509.Certificate | None = None, key: ec.EllipticCurvePrivateKey | None = None) -> str:
    from cryptography.hazmat.primitives import serialization

    with open(path, "wb") as f:
        if cert is not None:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        if key is not None:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return path


def make_pki(d: str) -> Pki:
    """Write the certificates and keys into directory ``d``; returns their paths."""
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_key, rogue_ca_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert("hmb test CA", ca_key, "hmb test CA", ca_key, ca=True)
    server_key, client_key, rogue_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    j = os.path.join
    return Pki(
        ca=_write(j(d, "ca.pem"), ca),
        server_cert=_write(j(d, "server.pem"), _cert("localhost", server_key, "hmb test CA", ca_key, server=True)),
        server_key=_write(j(d, "server.key"), key=server_key),
        client_cert=_write(j(d, "client.pem"), _cert("writer", client_key, "hmb test CA", ca_key)),
        client_key=_write(j(d, "client.key"), key=client_key),
        rogue_cert=_write(j(d, "rogue.pem"), _cert("intruder", rogue_key, "rogue CA", rogue_ca_key)),
        rogue_key=_write(j(d, "rogue.key"), key=rogue_key),
    )

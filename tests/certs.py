"""Throwaway certificate authorities and certificates for the TLS tests (``cryptography``).

    ca = TestCA(tmp_dir, "kwire test CA")
    server = ca.issue("server", dns=["localhost"], ips=["127.0.0.1"])     # .cert / .key paths
    client = ca.issue("client", dns=["kwire-client"], client=True, key_password="pw")

EC P-256 keys, one day of validity; nothing here is fit for anything but tests.
"""
from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    cert: str  # PEM path
    key: str  # PEM path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class TestCA:
    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, name: str):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = _name(name)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256()))
        slug = name.replace(" ", "-")
        self.pem = str(self.dir / f"{slug}.pem")
        Path(self.pem).write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, stem: str, *, dns=(), ips=(), client: bool = False, key_password: str | None = None,
              expired: bool = False) -> Issued:
        """A certificate signed by this CA; ``expired``: valid for one hour that ended a day ago."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)
        if expired:
            start, end = now - datetime.timedelta(days=1, hours=1), now - datetime.timedelta(days=1)
        sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = (
            x509.CertificateBuilder().subject_name(_name(dns[0] if dns else stem)).issuer_name(self.name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = self.dir / f"{stem}.pem", self.dir / f"{stem}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        enc = (serialization.BestAvailableEncryption(key_password.encode()) if key_password
               else serialization.NoEncryption())
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc))
        return Issued(str(cert_path), str(key_path))

    def pem_keystore(self, issued: Issued, path) -> str:
        """One file with the (unencrypted) PKCS#8 key, the certificate and this CA's: what a
        Java ``ssl.keystore.type=PEM`` keystore location holds."""
        Path(path).write_bytes(Path(issued.key).read_bytes() + Path(issued.cert).read_bytes()
                               + Path(self.pem).read_bytes())
        return str(path)

    def server_context(self, issued: Issued, *, require_client_cert_from: TestCA | None = None) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(issued.cert, issued.key)
        if require_client_cert_from is not None:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(cafile=require_client_cert_from.pem)
        return ctx

"""Certificates and keys for a throwaway control plane: one CA, the API server's serving cert,
an admin client cert in ``system:masters``, client certs for the other components, and the
service-account signing key pair. Everything is generated fresh per cluster."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

_VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: CertPair
    apiserver: CertPair
    admin: CertPair
    # Service-account token signing (RSA: required by the API server's --service-account-key-file).
    sa_key: Path
    sa_pub: Path

    def client(self, name: str) -> CertPair:
        """A component's client cert, created by :func:`generate` (see ``COMPONENT_USERS``)."""
        return CertPair(self.ca.cert.parent / f"{name}.crt", self.ca.cert.parent / f"{name}.key")


# Components authenticate as the users their default RBAC bindings expect.
COMPONENT_USERS = {
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
    # KWOK, KubeRay and Kueue run with cluster-admin rights, as their in-cluster deployments do
    # in tests.
    "kwok": ("kwok-controller", "system:masters"),
    "kuberay": ("kuberay-operator", "system:masters"),
    "kueue": ("kueue-controller-manager", "system:masters"),
}


def _write_key(key, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _issue(ca_cert, ca_key, subject: x509.Name, *, server: bool) -> tuple:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                ]
            ),
            critical=False,
        ).add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def _save(directory: Path, name: str, cert, key) -> CertPair:
    pair = CertPair(directory / f"{name}.crt", directory / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair


def generate(directory: Path) -> Pki:
    """Write a fresh PKI into ``directory`` and return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("grpo-localcluster-ca"))
        .issuer_name(_name("grpo-localcluster-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca = _save(directory, "ca", ca_cert, ca_key)
    apiserver = _save(
        directory, "apiserver", *_issue(ca_cert, ca_key, _name("kube-apiserver"), server=True)
    )
    admin = _save(
        directory, "admin",
        *_issue(ca_cert, ca_key, _name("admin", "system:masters"), server=False),
    )
    for component, (user, group) in COMPONENT_USERS.items():
        _save(directory, component, *_issue(ca_cert, ca_key, _name(user, group), server=False))

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_key_path, sa_pub_path = directory / "sa.key", directory / "sa.pub"
    _write_key(sa_key, sa_key_path)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(ca=ca, apiserver=apiserver, admin=admin, sa_key=sa_key_path, sa_pub=sa_pub_path)


def issue_serving(pki: Pki, name: str) -> CertPair:
    """A serving certificate of the cluster's CA for a local server (127.0.0.1, localhost),
    such as a webhook the API server calls."""
    ca_cert = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca.key.read_bytes(), password=None)
    return _save(pki.ca.cert.parent, name, *_issue(ca_cert, ca_key, _name(name), server=True))

"""A local certificate authority for mTLS between Rampart's services (``rampart certs dev``, the stack,
the tests).

Production certificates come from the deployment's own CA (cert-manager, a corporate PKI) as
Kubernetes Secrets; this makes the same files for one machine so the stack and the tests run with
mTLS on, as production does, instead of a plaintext path nobody deploys. Each service gets its own
certificate (its name as CN and SAN, plus ``localhost``, 127.0.0.1 and ::1), valid for server and
client use: every service is both. The CN is the component's identity: each server admits only the
CNs of its ``allowed_callers`` (``client``, for tools and tests, is in none by default). Keys are EC
P-256, written mode 600 in a 700 folder.

Usage::

    certs = make_dev_certs(Path(".rampart/certs"))          # ca.pem, retrieval.pem, retrieval-key.pem, …
    certs.cert("retrieval"), certs.key("retrieval"), certs.ca
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.common.errors import ErrorCode, RampartError

# every program of the stack that serves or calls gRPC, and one for tools and tests
SERVICE_NAMES = ("retrieval", "ingest", "gateway", "orchestrator", "client")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class DevCerts:
    """Where :func:`make_dev_certs` wrote the CA and each service's certificate and key."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.pem"

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}-key.pem"

    def env(self, name: str) -> dict[str, str]:
        """The ``remote.tls`` variables of the service ``name`` (paths only: no secret in them)."""
        return {
            "RAMPART_REMOTE__TLS__ENABLED": "true",
            "RAMPART_REMOTE__TLS__CA_FILE": str(self.ca),
            "RAMPART_REMOTE__TLS__CERT_FILE": str(self.cert(name)),
            "RAMPART_REMOTE__TLS__KEY_FILE": str(self.key(name)),
        }


def make_dev_certs(
    out: Path,
    names: Sequence[str] = SERVICE_NAMES,
    *,
    hosts: Sequence[str] = (),
    days: int = 30,
    overwrite: bool = True,
) -> DevCerts:
    """A fresh CA and one certificate per name in ``out`` (created mode 700). ``hosts``: extra SANs
    (DNS names or IPs) on every certificate; ``overwrite=False`` refuses a folder that has a CA."""
    certs = DevCerts(out)
    if certs.ca.exists() and not overwrite:
        raise RampartError(
            ErrorCode.CONFLICT,
            f"{certs.ca} exists; pass --force to replace the CA (every service then needs the new files) "
            "or choose another --out",
            path=str(certs.ca),
        )
    if not names:
        raise RampartError(ErrorCode.INVALID_ARGUMENT, "no service names; give at least one, e.g. retrieval")
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rampart dev CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(certs.ca, ca_cert.public_bytes(serialization.Encoding.PEM), secret=False)
    _write(out / "ca-key.pem", _key_pem(ca_key), secret=True)
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _leaf(name, [name, *LOCAL_HOSTS, *hosts], key, ca_cert, ca_key, now, days)
        _write(certs.cert(name), cert.public_bytes(serialization.Encoding.PEM), secret=False)
        _write(certs.key(name), _key_pem(key), secret=True)
    return certs


def _leaf(
    name: str,
    sans: Sequence[str],
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    now: dt.datetime,
    days: int,
) -> x509.Certificate:
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([_san(s) for s in dict.fromkeys(sans)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, *, secret: bool) -> None:
    """Write ``data`` to ``path``; a key is created mode 600 (never world-readable, not even briefly)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)

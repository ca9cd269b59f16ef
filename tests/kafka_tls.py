"""A TLS cluster for tests: the local broker behind stunnel4, with a CA and certificates made here by openssl.

Tansu listens on a plaintext port and advertises the TLS port, where stunnel accepts TLS and
forwards to it: every client the metadata sends on speaks TLS, as on a secured cluster
(a client without the settings fails instead of reading in plaintext).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from rankflow.services import LocalStunnel, LocalTansu, free_port


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str = "ca") -> Path:
    """A self-signed CA: ``name.pem`` (certificate) and ``name.key``; the certificate's path."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-days", "2", "-subj", f"/CN=rankflow test {name}", cwd=folder)
    return folder / f"{name}.pem"


def make_certificate(folder: Path, ca: Path, name: str) -> tuple[Path, Path]:
    """A certificate for ``IP:127.0.0.1`` signed by ``ca``: ``(name.pem, name.key)``."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}", cwd=folder)
    (folder / f"{name}.ext").write_text("subjectAltName = IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca), "-CAkey", str(ca.with_suffix(".key")),
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=folder)
    return folder / f"{name}.pem", folder / f"{name}.key"


@dataclass
class TlsBroker:
    brokers: str  # the TLS address (what the metadata names)
    plaintext: str  # Tansu's own listener, without TLS
    ca: Path  # the CA that signed the broker's certificate
    other_ca: Path  # a CA that did not
    tansu: LocalTansu
    stunnel: LocalStunnel

    def stop(self) -> None:
        self.stunnel.stop()
        self.tansu.stop()

    def config_file(self, folder: Path, *extra: str) -> Path:
        """A ``--kafka-config`` file for this cluster, with ``extra`` lines."""
        path = folder / "kafka.properties"
        path.write_text("# the local broker behind stunnel\nsecurity.protocol=SSL\n"
                        f"ssl.ca.location = {self.ca}\n" + "".join(f"{line}\n" for line in extra))
        return path


def start_tls_broker(folder: Path) -> TlsBroker:
    certs = folder / "certs"
    ca = make_ca(certs)
    other = make_ca(certs, "other-ca")
    cert, key = make_certificate(certs, ca, "broker")
    bundle = certs / "broker-bundle.pem"
    bundle.write_bytes(cert.read_bytes() + key.read_bytes())
    tls_port, plain_port = free_port(), free_port()
    tansu = LocalTansu(plain_port, folder / "tansu", advertised_port=tls_port).start()
    try:
        stunnel = LocalStunnel(tls_port, folder / "stunnel", target=plain_port, cert=bundle).start()
    except BaseException:
        tansu.stop()
        raise
    return TlsBroker(stunnel.url, tansu.url, ca, other, tansu, stunnel)

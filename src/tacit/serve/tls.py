"""TLS for ``tacit serve``: with a certificate and its key configured, OTLP/HTTP, the query API,
the page and ``/metrics`` are served over HTTPS, and OTLP/gRPC over TLS, with the same PEM
files (the form OpenSSL, cert-manager and Let's Encrypt write). Python's :mod:`ssl` and gRPC's
own credentials do the work; the default settings of :func:`ssl.create_default_context` for a
server apply (TLS 1.2 and later, the system's ciphers)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from tacit.errors import ConfigError


@dataclass(frozen=True)
class ServerTLS:
    """A certificate chain and its private key, both PEM, read and checked once."""

    cert: bytes
    key: bytes
    context: ssl.SSLContext

    def grpc_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key, self.cert)])


def load_tls(cert_file: Path, key_file: Path) -> ServerTLS:
    """The certificate in ``cert_file`` and the key in ``key_file``; a file that cannot be read,
    is not PEM or does not pair with the other is a one-line error naming it."""
    files = {"tls_cert_file": cert_file, "tls_key_file": key_file}
    data = {}
    for name, path in files.items():
        try:
            data[name] = path.read_bytes()
        except OSError as e:
            raise ConfigError(f"{name}: cannot read {path}: {e.strerror}") from None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as e:
        raise ConfigError(
            f"tls_cert_file, tls_key_file: {cert_file} and {key_file} are not a PEM certificate "
            f"and its key ({e.reason or e})"
        ) from None
    return ServerTLS(data["tls_cert_file"], data["tls_key_file"], context)

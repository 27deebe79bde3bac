"""Who may send data to ``tacit serve``, and who may read it.

- With an ingest token configured, every request that brings data (OTLP/HTTP and OTLP/gRPC
  exports, RDA records POSTed) must carry it as ``Authorization: Bearer TOKEN`` (RFC 6750
  §2.1), which the OpenTelemetry exporters send when given it as a header
  (``OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer TOKEN"``).
- With a query token configured, every GET but the health checks (the Jaeger query API, the
  page, ``/metrics``) must carry it, as ``Bearer TOKEN`` or as the password of HTTP Basic
  authentication (RFC 7617) with any user name: what a browser asks for on the page, and what
  Grafana's Jaeger data source and Prometheus's scrape configuration can send.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from pathlib import Path

from tacit.errors import ConfigError

SCHEME = "bearer"
BASIC = "basic"


def read_token(path: Path, name: str = "ingest_token_file") -> str:
    """The token in the file ``path`` (its first line, without surrounding blanks); ``name``
    is the setting that named the file, for errors."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{name}: cannot read {path}: {e}") from None
    lines = text.strip().splitlines()
    token = lines[0].strip() if lines else ""
    if not token or any(c.isspace() for c in token):
        raise ConfigError(f"{name}: {path} must hold one token, without blanks")
    return token


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header's value carries ``token`` as a bearer token (any
    header when there is none to carry), compared in constant time."""
    if token is None:
        return True
    credentials = _credentials(header, SCHEME)
    return credentials is not None and _same(credentials, token)


def _credentials(header: str | None, scheme: str) -> str | None:
    """What follows ``scheme`` in an ``Authorization`` header's value, which names it in any
    case (RFC 9110 §11.1: schemes are case-insensitive); None for another scheme."""
    name, _, rest = (header or "").strip().partition(" ")
    return rest.strip() if name.lower() == scheme and rest.strip() else None


def may_read(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header's value carries ``token`` as a bearer token or as
    the password of Basic authentication (any user name); any header when there is no token."""
    if token is None or authorized(header, token):
        return True
    credentials = _credentials(header, BASIC)
    if credentials is None:
        return False
    try:
        pair = base64.b64decode(credentials, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    _, colon, password = pair.partition(":")
    return bool(colon) and _same(password, token)

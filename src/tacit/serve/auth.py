"""Who may send data to ``tacit serve``: with an ingest token configured, every request that
brings data (OTLP/HTTP and OTLP/gRPC exports, RDA records POSTed) must carry it as
``Authorization: Bearer TOKEN`` (RFC 6750 §2.1), which the OpenTelemetry exporters send when
given it as a header (``OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer TOKEN"``). The query
API, the page and ``/metrics`` stay open, for Jaeger UI and Grafana, which read only."""

from __future__ import annotations

import hmac
from pathlib import Path

from tacit.errors import ConfigError

SCHEME = "Bearer "


def read_token(path: Path) -> str:
    """The token in the file ``path`` (its first line, without surrounding blanks)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"ingest_token_file: cannot read {path}: {e}") from None
    lines = text.strip().splitlines()
    token = lines[0].strip() if lines else ""
    if not token or any(c.isspace() for c in token):
        raise ConfigError(f"ingest_token_file: {path} must hold one token, without blanks")
    return token


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header's value carries ``token`` (any header when there is
    none to carry), compared in constant time."""
    if token is None:
        return True
    if not header or not header.startswith(SCHEME):
        return False
    return hmac.compare_digest(header[len(SCHEME) :].strip().encode(), token.encode())

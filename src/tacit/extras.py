"""The distribution's optional extras, and the check that one is installed: a command that
needs an extra says which, in one line (exit 2), rather than failing at its first import."""

from __future__ import annotations

from importlib.util import find_spec

from tacit.errors import ConfigError

DISTRIBUTION = "tacit-traces"
"""The name tacit is installed by (``pip install tacit-traces``): ``tacit`` on the public index
is another project. The package and the command are ``tacit``."""

EXTRAS = {
    "serve": (
        "duckdb",
        "uvicorn",
        "httptools",
        "zstandard",
        "cramjam",
        "prometheus_client",
        "grpc_status",
        "opentelemetry.sdk",
    ),
    "dask": ("distributed",),
    "cluster": ("nats",),
}
"""The modules each extra brings that tacit imports (``pyproject.toml`` lists the packages)."""


def require_extra(extra: str, what: str) -> None:
    """Raise a :class:`~tacit.errors.ConfigError` naming the extra to install when a module of
    ``extra`` is not importable; ``what`` is what needs it (``tacit serve``)."""
    missing = [m for m in EXTRAS[extra] if not _importable(m)]
    if missing:
        raise ConfigError(
            f"{what} needs the {extra} extra: pip install '{DISTRIBUTION}[{extra}]' "
            f"(not installed: {', '.join(missing)})"
        )


def _importable(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False

"""The names :mod:`tacit.serve` exports, each imported on first use (``__init__.py``)."""

from .config import SERVE_ONLINE, ServeConfig, load_config
from .service import Service
from .store import Store, TraceQuery

__all__ = [
    "SERVE_ONLINE",
    "ServeConfig",
    "Service",
    "Store",
    "TraceQuery",
    "load_config",
]

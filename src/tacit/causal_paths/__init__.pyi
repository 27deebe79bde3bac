"""The names :mod:`tacit.causal_paths` exports, each imported on first use (``__init__.py``)."""

from .analysis import PathParams, analyze_paths, evaluate_paths
from .inputs import read_any_messages, read_messages
from .linking import LinkParams, latest_links, link_messages
from .nesting import NestingParams, nest_calls
from .patterns import Pattern, find_patterns
from .reconcile import ReconcileParams, reconcile

__all__ = [
    "LinkParams",
    "NestingParams",
    "PathParams",
    "Pattern",
    "ReconcileParams",
    "analyze_paths",
    "evaluate_paths",
    "find_patterns",
    "latest_links",
    "link_messages",
    "nest_calls",
    "read_any_messages",
    "read_messages",
    "reconcile",
]

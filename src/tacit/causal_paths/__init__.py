"""Causal paths from black-box message traces (WAP5, Reynolds et al., WWW '06).

- :mod:`~.inputs`: messages from socket logs, message tables, or spans.
- :mod:`~.reconcile`: the two ends of each connection's messages matched (§4).
- :mod:`~.clocks`: clock offsets between hosts.
- :mod:`~.linking`: each message's cause, by the nesting delay model (§5.1).
- :mod:`~.patterns` and :mod:`~.analysis`: path patterns and per-hop delays (§5.2); scores.
- :mod:`~.nesting`: Project 5's nesting algorithm, the baseline.
- :mod:`~.timeline`: timeline figures of patterns.
"""

from tacit.causal_paths.analysis import PathParams, analyze_paths, evaluate_paths
from tacit.causal_paths.inputs import read_any_messages, read_messages
from tacit.causal_paths.linking import LinkParams, latest_links, link_messages
from tacit.causal_paths.nesting import NestingParams, nest_calls
from tacit.causal_paths.patterns import Pattern, find_patterns
from tacit.causal_paths.reconcile import ReconcileParams, reconcile

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

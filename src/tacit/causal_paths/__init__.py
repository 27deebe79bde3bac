"""Causal paths from black-box message traces (WAP5, Reynolds et al., WWW '06).

- :mod:`~.inputs`: messages from socket logs, message tables, or spans.
- :mod:`~.reconcile`: the two ends of each connection's messages matched (§4).
- :mod:`~.clocks`: clock offsets between hosts.
- :mod:`~.linking`: each message's cause, by the nesting delay model (§5.1).
- :mod:`~.patterns` and :mod:`~.analysis`: path patterns and per-hop delays (§5.2); scores.
- :mod:`~.nesting`: Project 5's nesting algorithm, the baseline.
- :mod:`~.timeline`: timeline figures of patterns.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

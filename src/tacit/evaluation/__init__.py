"""Scoring against ground truth: trace accuracy, the TraceWeaver evaluation, the demo job.

- :mod:`~.trace_accuracy`: end-to-end, link and per-service accuracy (TraceWeaver §6.1).
- :mod:`~.reconstruction`: blind, reconstruct and score with every algorithm (§6).
- :mod:`~.demo`: accuracy against load on the simulated app (``make demo``).
- :mod:`~.otel_app`: reconstructed traces of the OpenTelemetry app against its own truth.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

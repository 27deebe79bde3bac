"""tacit: observability without instrumentation.

Request traces, causal paths and latencies inferred from what is visible anyway: spans seen at
a sidecar or with eBPF, socket-call logs, packet captures, syslogs. ``docs/design.md`` describes
the packages, the layers they form and the conventions.
"""

__version__ = "0.1.0"

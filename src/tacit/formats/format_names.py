"""The names of the span formats, importable without their readers: commands list them in their
help and check an option against them before reading anything (:mod:`.span_files` registers its
readers and writers under these names, which its tests hold to the registry)."""

from __future__ import annotations

from collections.abc import Sequence

DETECTED = ("jaeger", "zipkin", "otlp", "csv", "blind")
"""The formats told apart by a file's content."""
AGENT = ("ebpf", "envoy")
"""Spans from per-service agents: never detected, always named."""
READ = ("auto", *DETECTED, *AGENT)
WRITE = ("jaeger", "otlp", "zipkin")
STREAM_READ = ("blind", "csv", "otlp")
"""The input formats a reconstruction streams (the others are read whole)."""
STREAM_WRITE = ("jaeger", "otlp")
"""The output formats written trace by trace as traces finish."""


def listed(names: Sequence[str]) -> str:
    """``names`` as a sentence's list: "a, b or c"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"

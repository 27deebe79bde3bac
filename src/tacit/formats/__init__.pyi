"""The names :mod:`tacit.formats` exports, each imported on first use (``__init__.py``)."""

from .jaeger import read_jaeger, write_jaeger
from .otlp import read_otlp, read_otlp_protobuf, write_otlp
from .span_files import (
    AGENT_FORMATS,
    DUPLICATE_SPANS,
    READ_FORMATS,
    SKIPPED_FILES,
    STREAM_WRITE_FORMATS,
    SUFFIXES,
    WRITE_FORMATS,
    detect_format,
    observe,
    read_agent_spans,
    read_span_set,
    read_spans,
    write_traces,
    write_traces_stream,
)
from .span_join import Joined, join_inputs
from .spancsv import read_span_csv
from .zipkin import read_zipkin, write_zipkin

__all__ = [
    "AGENT_FORMATS",
    "DUPLICATE_SPANS",
    "READ_FORMATS",
    "SKIPPED_FILES",
    "STREAM_WRITE_FORMATS",
    "SUFFIXES",
    "WRITE_FORMATS",
    "Joined",
    "detect_format",
    "join_inputs",
    "observe",
    "read_agent_spans",
    "read_jaeger",
    "read_otlp",
    "read_otlp_protobuf",
    "read_span_csv",
    "read_span_set",
    "read_spans",
    "read_zipkin",
    "write_jaeger",
    "write_otlp",
    "write_traces",
    "write_traces_stream",
    "write_zipkin",
]

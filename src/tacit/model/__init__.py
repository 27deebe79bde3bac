"""Plain data types through which tacit's stages talk to each other."""

from tacit.model.spans import (
    CLIENT,
    INTERNAL,
    KIND_CODES,
    KIND_NAMES,
    NONE,
    SERVER,
    UNKNOWN,
    SpanTable,
    SpanTableBuilder,
    StringPool,
    concat,
)

__all__ = [
    "CLIENT",
    "INTERNAL",
    "KIND_CODES",
    "KIND_NAMES",
    "NONE",
    "SERVER",
    "UNKNOWN",
    "SpanTable",
    "SpanTableBuilder",
    "StringPool",
    "concat",
]

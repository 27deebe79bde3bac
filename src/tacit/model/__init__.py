"""Plain data types through which tacit's stages talk to each other."""

from tacit.model.messages import MessageTable
from tacit.model.packets import PacketTable
from tacit.model.roles import Observed, infer_roles
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
    "MessageTable",
    "Observed",
    "PacketTable",
    "SpanTable",
    "SpanTableBuilder",
    "StringPool",
    "concat",
    "infer_roles",
]

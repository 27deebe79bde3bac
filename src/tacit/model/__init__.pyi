"""The names :mod:`tacit.model` exports, each imported on first use (``__init__.py``)."""

from .captures import PacketAccounting, PacketRead
from .messages import MessageTable
from .packets import PacketTable
from .roles import Observed, infer_roles
from .socket_events import SocketEvents, SocketEventsBuilder, concat_events
from .span_details import SpanDetail, SpanEvent
from .spans import (
    CLIENT,
    INTERNAL,
    KIND_CODES,
    KIND_NAMES,
    NONE,
    SERVER,
    UNKNOWN,
    SpanInput,
    SpanTable,
    SpanTableBuilder,
    StringPool,
    concat,
)
from .syslog_records import SyslogRecords
from .tcp_info import TcpInfoTable

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
    "PacketAccounting",
    "PacketRead",
    "PacketTable",
    "SocketEvents",
    "SocketEventsBuilder",
    "SpanDetail",
    "SpanEvent",
    "SpanInput",
    "SpanTable",
    "SpanTableBuilder",
    "StringPool",
    "SyslogRecords",
    "TcpInfoTable",
    "concat",
    "concat_events",
    "infer_roles",
]

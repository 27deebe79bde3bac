"""Plain data types through which tacit's stages talk to each other."""

from tacit.model.captures import PacketAccounting, PacketRead
from tacit.model.messages import MessageTable
from tacit.model.packets import PacketTable
from tacit.model.roles import Observed, infer_roles
from tacit.model.socket_events import SocketEvents, SocketEventsBuilder, concat_events
from tacit.model.span_details import SpanDetail, SpanEvent
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
from tacit.model.syslog_records import SyslogRecords
from tacit.model.tcp_info import TcpInfoTable

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
    "SpanTable",
    "SpanTableBuilder",
    "StringPool",
    "SyslogRecords",
    "TcpInfoTable",
    "concat",
    "concat_events",
    "infer_roles",
]

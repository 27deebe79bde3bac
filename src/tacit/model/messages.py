"""Messages as numpy column batches: what black-box causal path analysis works on.

A message is one application-level transfer from a sending node to a receiving node (WAP5,
Reynolds et al., WWW '06, §2): the bytes one side of a connection writes before the other side
answers, or one datagram. It carries the send time on the sender's clock and the receive time on
the receiver's clock; either is :data:`MISSING` where that end was not traced. Nodes are the
processes that send and receive (named as in WAP5 Table 1), each on a host whose clock may be
off from the others; endpoints are the addresses a node used for the message (``ip:port``, or an
RPC endpoint name for messages derived from traces).

Strings are interned into one :class:`~tacit.model.spans.StringPool` per table and stored as
int32 codes. Times are int64 nanoseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from tacit.model.columns import ColumnTable, StringPool, recode
from tacit.runs import distinct

MISSING = np.iinfo(np.int64).min
"""The timestamp of an end that was not traced."""

_COLUMNS = {
    "src": np.int32,
    "dst": np.int32,
    "src_host": np.int32,
    "dst_host": np.int32,
    "src_endpoint": np.int32,
    "dst_endpoint": np.int32,
    "send": np.int64,
    "recv": np.int64,
    "size": np.int64,
    "flow": np.int64,
    "record": np.int64,
}
_STRING_COLUMNS = ("src", "dst", "src_host", "dst_host", "src_endpoint", "dst_endpoint")


@dataclass
class MessageTable(ColumnTable):
    """A batch of messages, one numpy column per field.

    ``src``/``dst`` (nodes), ``src_host``/``dst_host`` (the hosts whose clocks stamped ``send``
    and ``recv``) and ``src_endpoint``/``dst_endpoint`` are codes into ``strings``. ``size`` is
    in bytes (-1 unknown). ``flow`` numbers the connection a message travelled on, the same for
    both directions (-1 unknown): a call and its return share it. ``record`` is the position of
    the message (or of its first event) in its input, for error messages and accounting;
    ``sources`` names the input files.
    """

    strings: StringPool
    src: np.ndarray
    dst: np.ndarray
    src_host: np.ndarray
    dst_host: np.ndarray
    src_endpoint: np.ndarray
    dst_endpoint: np.ndarray
    send: np.ndarray
    recv: np.ndarray
    size: np.ndarray
    flow: np.ndarray
    record: np.ndarray
    sources: list[str] = field(default_factory=list)
    COLUMNS: ClassVar[Mapping[str, npt.DTypeLike]] = _COLUMNS

    def take(self, rows: np.ndarray) -> MessageTable:
        """The messages at ``rows`` (an index array or mask)."""
        rows = np.flatnonzero(rows) if rows.dtype == bool else np.asarray(rows, dtype=np.int64)
        return MessageTable(
            self.strings, **{k: v[rows] for k, v in self.columns().items()}, sources=self.sources
        )

    def describe(self, row: int) -> str:
        """A short human description of one message, for errors and reports."""
        return (
            f"{self.name('src', row)} -> {self.name('dst', row)} (record {int(self.record[row])})"
        )

    def node_names(self) -> list[str]:
        """Every node that sends or receives, sorted."""
        codes = distinct(np.concatenate([self.src, self.dst]))
        return sorted(self.strings.values[c] for c in codes.tolist() if c >= 0)


def concat_messages(tables: Sequence[MessageTable]) -> MessageTable:
    """Concatenate tables, re-interning strings into one pool."""
    if not tables:
        return MessageTable.empty()
    pool = StringPool()
    parts: dict[str, list[np.ndarray]] = {k: [] for k in _COLUMNS}
    sources: list[str] = []
    for t in tables:
        table = recode(pool, t.strings)
        for k, v in t.columns().items():
            parts[k].append(table[v] if k in _STRING_COLUMNS else v)
        sources.extend(s for s in t.sources if s not in sources)
    return MessageTable(pool, **{k: np.concatenate(v) for k, v in parts.items()}, sources=sources)


class MessageTableBuilder:
    """Accumulates messages one by one (as readers produce them) and builds a table."""

    def __init__(self, source: str = "", strings: StringPool | None = None) -> None:
        self.strings = strings or StringPool()
        self.source = source
        self._cols: dict[str, list] = {k: [] for k in _COLUMNS}

    def add(
        self,
        *,
        src: str,
        dst: str,
        send: int,
        recv: int,
        record: int,
        src_host: str | None = None,
        dst_host: str | None = None,
        src_endpoint: str | None = None,
        dst_endpoint: str | None = None,
        size: int = -1,
        flow: int = -1,
    ) -> int:
        """Append one message (hosts default to the node names); returns its row."""
        s = self.strings
        c = self._cols
        c["src"].append(s.code(src))
        c["dst"].append(s.code(dst))
        c["src_host"].append(s.code(src_host if src_host is not None else src))
        c["dst_host"].append(s.code(dst_host if dst_host is not None else dst))
        c["src_endpoint"].append(s.code(src_endpoint))
        c["dst_endpoint"].append(s.code(dst_endpoint))
        c["send"].append(send)
        c["recv"].append(recv)
        c["size"].append(size)
        c["flow"].append(flow)
        c["record"].append(record)
        return len(c["send"]) - 1

    def __len__(self) -> int:
        return len(self._cols["send"])

    def build(self) -> MessageTable:
        cols = {k: np.asarray(v, dtype=_COLUMNS[k]) for k, v in self._cols.items()}
        return MessageTable(self.strings, **cols, sources=[self.source] if self.source else [])


@dataclass
class MessageTruth:
    """Ground truth for a message table, from a simulator or from traced requests.

    ``parent[i]`` is the row of the message whose receipt caused message ``i`` to be sent (the
    latest message of the same request that its sender received before sending it), -1 for a
    spontaneous message (the first message of a request). ``request[i]`` numbers the request
    (causal tree) the message belongs to. ``host_offset`` maps each host to how far its clock
    was off (ns, added to true time), when known.
    """

    parent: np.ndarray
    request: np.ndarray
    host_offset: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.parent = np.asarray(self.parent, dtype=np.int64)
        self.request = np.asarray(self.request, dtype=np.int64)

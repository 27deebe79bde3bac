"""Socket events: the calls traced processes made on their sockets, as numpy columns.

WAP5 (Reynolds et al., "WAP5: Black-box Performance Debugging for Wide-Area Systems", WWW '06,
§4) records, per traced process, every socket call (connect, accept, send, receive, close) with
its time, byte count and addresses, and reconciles the per-process logs into messages
(:mod:`tacit.causal_paths.reconcile`). This module holds the table those logs are read into
(:class:`SocketEvents`, by the readers of :mod:`tacit.formats.strace` and
:mod:`tacit.formats.socketevents`), the codes of its columns, and the ``ip:port`` form of its
addresses.

The socket an event belongs to is (host, pid, fd) from its ``connect``/``accept`` (or first
use) to its ``close``: an fd number reused after a close is a new socket.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from tacit.digits import ascii_digits
from tacit.model.columns import NONE, ColumnTable, StringPool, recode, typed_columns

CONNECT, ACCEPT, SEND, RECV, CLOSE, BIND, LISTEN, SHUTDOWN = range(8)
"""Event kinds. Only SEND and RECV carry bytes; the others mark a socket's life."""
KIND_NAMES = {
    CONNECT: "connect",
    ACCEPT: "accept",
    SEND: "send",
    RECV: "recv",
    CLOSE: "close",
    BIND: "bind",
    LISTEN: "listen",
    SHUTDOWN: "shutdown",
}
KIND_CODES = {v: k for k, v in KIND_NAMES.items()}

TCP, UDP = 0, 1
UNKNOWN_PROTO = -1
PROTO_NAMES = {TCP: "tcp", UDP: "udp"}
PROTO_CODES = {v: k for k, v in PROTO_NAMES.items()}

NO_CHECKSUM = -1

_COLUMNS = {
    "time": np.int64,
    "host": np.int32,
    "node": np.int32,
    "pid": np.int64,
    "fd": np.int64,
    "sock": np.int64,
    "kind": np.int8,
    "bytes": np.int64,
    "local": np.int32,
    "remote": np.int32,
    "proto": np.int8,
    "checksum": np.int64,
    "record": np.int64,
    "source": np.int32,
}
_STRING_COLUMNS = ("host", "node", "local", "remote")


@dataclass
class SocketEvents(ColumnTable):
    """Socket calls of traced processes, one numpy column per field.

    ``time`` is int64 ns on the clock of ``host``. ``host`` and ``node`` (the traced process, as
    WAP5 §2.5 names it), ``local`` and ``remote`` (``ip:port``) are codes into ``strings``.
    ``sock`` numbers sockets uniquely across the table: one (pid, fd) from its creation to its
    close. ``kind`` is one of the kind constants, ``bytes`` the byte count of a send or recv (0
    otherwise; the ``how`` of a shutdown), ``proto`` TCP or UDP, ``checksum`` identifies a
    datagram's content (-1 unknown). ``record`` is the event's line in its input, ``source``
    an index into ``sources``. ``accounting`` counts every input line by what became of it.
    """

    strings: StringPool
    time: np.ndarray
    host: np.ndarray
    node: np.ndarray
    pid: np.ndarray
    fd: np.ndarray
    sock: np.ndarray
    kind: np.ndarray
    bytes: np.ndarray
    local: np.ndarray
    remote: np.ndarray
    proto: np.ndarray
    checksum: np.ndarray
    record: np.ndarray
    source: np.ndarray
    sources: list[str] = field(default_factory=list)
    accounting: dict[str, int] = field(default_factory=dict)
    COLUMNS: ClassVar[Mapping[str, npt.DTypeLike]] = _COLUMNS

    def where(self, row: int) -> str:
        """``FILE line N`` of one event, for messages."""
        src = int(self.source[row])
        path = self.sources[src] if 0 <= src < len(self.sources) else "?"
        return f"{path} line {int(self.record[row])}"


def concat_events(tables: Sequence[SocketEvents]) -> SocketEvents:
    """Concatenate event tables: strings re-interned, socket ids and sources kept distinct."""
    if not tables:
        return SocketEvents.empty()
    pool = StringPool()
    parts: dict[str, list[np.ndarray]] = {k: [] for k in _COLUMNS}
    sources: list[str] = []
    accounting: dict[str, int] = {}
    sock_offset = 0
    for t in tables:
        table = recode(pool, t.strings)
        for k, v in t.columns().items():
            if k in _STRING_COLUMNS:
                v = table[v]
            elif k == "sock":
                v = v + sock_offset
            elif k == "source":
                v = v + len(sources)
            parts[k].append(v)
        if len(t):
            sock_offset += int(t.sock.max()) + 1
        sources.extend(t.sources)
        for k, n in t.accounting.items():
            accounting[k] = accounting.get(k, 0) + n
    return SocketEvents(
        pool,
        **{k: np.concatenate(v) for k, v in parts.items()},
        sources=sources,
        accounting=accounting,
    )


class SocketEventsBuilder:
    """Accumulates events of one input (as a reader parses them) and builds the table.

    Socket state (protocol, local and remote address) lives here too, so that an address learnt
    late (``getsockname`` after ``connect``) is filled into the socket's earlier events at
    :meth:`build`.
    """

    def __init__(self, source: str) -> None:
        self.strings = StringPool()
        self.source = source
        self._cols: dict[str, list] = {k: [] for k in _COLUMNS if k != "source"}
        self.sock_proto: list[int] = []
        self.sock_local: list[int] = []
        self.sock_remote: list[int] = []
        self.accounting: dict[str, int] = {}

    def count(self, reason: str, n: int = 1) -> None:
        self.accounting[reason] = self.accounting.get(reason, 0) + n

    def new_socket(self, proto: int, local: str | None = None, remote: str | None = None) -> int:
        self.sock_proto.append(proto)
        self.sock_local.append(self.strings.code(local))
        self.sock_remote.append(self.strings.code(remote))
        return len(self.sock_proto) - 1

    def set_address(self, sock: int, *, local: str | None = None, remote: str | None = None):
        if local is not None:
            self.sock_local[sock] = self.strings.code(local)
        if remote is not None:
            self.sock_remote[sock] = self.strings.code(remote)

    def add(
        self,
        *,
        time: int,
        host: int,
        node: int,
        pid: int,
        fd: int,
        sock: int,
        kind: int,
        record: int,
        nbytes: int = 0,
        remote: str | None = None,
        checksum: int = NO_CHECKSUM,
    ) -> None:
        """Append one event; ``host``/``node`` are codes, ``remote`` overrides the socket's."""
        self.append(
            time,
            host,
            node,
            pid,
            fd,
            sock,
            kind,
            record,
            nbytes,
            NONE if remote is None else self.strings.code(remote),
            checksum,
        )

    def append(
        self,
        time: int,
        host: int,
        node: int,
        pid: int,
        fd: int,
        sock: int,
        kind: int,
        record: int,
        nbytes: int,
        remote: int,
        checksum: int,
    ) -> None:
        """:meth:`add` with positional arguments and ``remote`` as a code (-1: the socket's),
        for readers' inner loops."""
        c = self._cols
        c["time"].append(time)
        c["host"].append(host)
        c["node"].append(node)
        c["pid"].append(pid)
        c["fd"].append(fd)
        c["sock"].append(sock)
        c["kind"].append(kind)
        c["bytes"].append(nbytes)
        c["local"].append(self.sock_local[sock])
        c["remote"].append(self.sock_remote[sock] if remote == NONE else remote)
        c["proto"].append(self.sock_proto[sock])
        c["checksum"].append(checksum)
        c["record"].append(record)

    def __len__(self) -> int:
        return len(self._cols["time"])

    def build(self) -> SocketEvents:
        cols = typed_columns(self._cols, _COLUMNS, self._cols["record"], self.source)
        cols["source"] = np.zeros(len(cols["time"]), dtype=np.int32)
        if len(cols["time"]):
            # Addresses and protocol learnt after an event are filled in (a socket has one local
            # address; a remote one unless it is an unconnected datagram socket, whose events
            # carry their own).
            sock = cols["sock"]
            local = np.asarray(self.sock_local, dtype=np.int32)[sock]
            remote = np.asarray(self.sock_remote, dtype=np.int32)[sock]
            cols["local"] = np.where(cols["local"] == NONE, local, cols["local"])
            cols["remote"] = np.where(cols["remote"] == NONE, remote, cols["remote"])
            cols["proto"] = np.asarray(self.sock_proto, dtype=np.int8)[sock]
        return SocketEvents(self.strings, **cols, sources=[self.source], accounting=self.accounting)


# --- addresses ---------------------------------------------------------------------------------

WILDCARD_IPS = frozenset({"0.0.0.0", "::", ""})


def format_addr(ip: str, port: int) -> str:
    """``ip:port``, with IPv6 addresses in brackets."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def split_addr(addr: str) -> tuple[str, int]:
    """(ip, port) of ``ip:port`` or ``[v6]:port``; ValueError when it is not one."""
    ip, sep, port = addr.rpartition(":")
    if not sep or not ascii_digits(port):
        raise ValueError(f"not an ip:port address: {addr!r}")
    if ip.startswith("[") and ip.endswith("]"):
        ip = ip[1:-1]
    return ip, int(port)

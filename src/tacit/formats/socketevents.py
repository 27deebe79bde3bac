"""Socket events as JSON lines, and what the socket-event readers share.

WAP5 (Reynolds et al., "WAP5: Black-box Performance Debugging for Wide-Area Systems", WWW '06,
§4) records, per traced process, every socket call (connect, accept, send, receive, close) with
its time, byte count and addresses. The readers of such logs (this module's JSON lines and
:mod:`tacit.formats.strace`) read them into :class:`~tacit.model.socket_events.SocketEvents`;
this module holds the fd bookkeeping they share (:class:`FdTable`), their time conversions, and
the documented JSON-lines form of the events.

JSON-lines socket events
------------------------
One object per line::

    {"time": 1714557600001000000, "host": "web1", "pid": 1234, "fd": 5, "call": "send",
     "bytes": 120, "local": "10.0.0.1:45678", "remote": "10.0.0.2:80", "proto": "tcp",
     "checksum": 305419896}

- ``time``: int nanoseconds since the epoch, or an ISO-8601 string (UTC when it has no offset;
  up to nine fractional digits), or a float in seconds.
- ``host`` (required unless the reader is given one), ``pid`` (default 0), ``fd`` (required).
- ``call``: ``connect``, ``accept``, ``send``, ``recv``, ``close``, ``bind``, ``listen`` or
  ``shutdown``; the syscall names strace prints (``write``, ``sendto``, ``recvfrom``,
  ``accept4``, ...) are accepted as aliases.
- ``bytes``: the byte count of a send or recv (required for those).
- ``local``/``remote``: ``ip:port`` (``[v6]:port`` for IPv6) or null; for a datagram
  ``remote`` is the destination of a send and the source of a recv.
- ``proto``: ``tcp`` or ``udp`` (default: what the socket was before, else tcp).
- ``checksum``: an integer identifying the datagram's content (a string is hashed with CRC-32);
  null when unknown. Only datagrams use it.
- ``node`` (optional): the node name; by default the host (or ``host:pid`` with
  ``node_per_pid``).

The socket an event belongs to is (host, pid, fd) from its ``connect``/``accept`` (or first
use) to its ``close``: an fd number reused after a close is a new socket.
"""

from __future__ import annotations

import calendar
import math
import re
import zlib
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from tacit.digits import ascii_digits
from tacit.errors import InputError
from tacit.formats.fields import RecordReader
from tacit.formats.textio import iter_json_lines
from tacit.model.socket_events import (
    ACCEPT,
    CLOSE,
    CONNECT,
    KIND_CODES,
    KIND_NAMES,
    NO_CHECKSUM,
    PROTO_CODES,
    PROTO_NAMES,
    RECV,
    SEND,
    TCP,
    SocketEvents,
    SocketEventsBuilder,
    format_addr,
    split_addr,
)
from tacit.outputs import write_bytes

CALL_ALIASES = {
    "accept4": ACCEPT,
    "write": SEND,
    "writev": SEND,
    "sendto": SEND,
    "sendmsg": SEND,
    "sendfile": SEND,
    "read": RECV,
    "readv": RECV,
    "recvfrom": RECV,
    "recvmsg": RECV,
}
"""Syscall names accepted for ``call`` in JSON lines, besides the kind names."""


class FdTable:
    """Which socket each (pid, fd) of one traced program refers to.

    strace's ``network,read,write,close`` trace set shows neither ``clone`` nor ``fork``, so
    which pids share an fd table is unknown. A pid's own sockets (those it created by
    ``socket``, ``accept`` or ``connect``) come first; an fd the pid never opened is looked up
    among the sockets of the other pids of the same log (the threads of a process share its fd
    table; forked children inherit it). A close by any pid closes the socket for all (thread
    semantics: a forked child that uses an fd its parent already closed is not recognised
    without ``-yy``). An fd reused after its close is a new socket.
    """

    def __init__(self) -> None:
        self._own: dict[tuple[int, int], int] = {}
        self._shared: dict[int, int] = {}
        self._closed: set[int] = set()

    def open(self, pid: int, fd: int, sock: int) -> None:
        self._own[(pid, fd)] = sock
        self._shared[fd] = sock

    def get(self, pid: int, fd: int) -> int | None:
        sock = self._own.get((pid, fd))
        if sock is not None and sock not in self._closed:
            return sock
        sock = self._shared.get(fd)
        if sock is not None:
            self._own[(pid, fd)] = sock
        return sock

    def close(self, pid: int, fd: int) -> int | None:
        """Forget the socket on ``fd`` (returned), or None when it was not a socket."""
        sock = self.get(pid, fd)
        if sock is None:
            return None
        self._own.pop((pid, fd), None)
        if self._shared.get(fd) == sock:
            del self._shared[fd]
        self._closed.add(sock)
        return sock

    def forget(self, pid: int, fd: int) -> None:
        """``fd`` is known not to be a socket (``-yy`` says it is a file)."""
        sock = self._own.pop((pid, fd), None)
        if sock is not None and self._shared.get(fd) == sock:
            del self._shared[fd]


# --- times ---------------------------------------------------------------------------------------

_ISO = re.compile(
    r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d(?::\d\d)?)(?:[.,](\d+))?\s*(Z|[+-]\d\d(?::?\d\d)?)?",
    re.IGNORECASE,
)
_DECIMAL = re.compile(r"[+-]?(\d+)(?:\.(\d*))?")


def iso_to_ns(text: str) -> int:
    """Nanoseconds since the epoch of an ISO-8601 date-time (UTC when it has no offset).

    Up to nine fractional digits are kept exactly (datetime keeps six); ValueError otherwise.
    """
    m = _ISO.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not an ISO-8601 time: {text!r}")
    day, clock, frac, tz = m.groups()
    dt = datetime.fromisoformat(f"{day}T{clock}")
    seconds = calendar.timegm(dt.timetuple())
    if tz and tz.upper() != "Z":
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        seconds -= sign * int(offset.total_seconds())
    ns = int((frac or "0")[:9].ljust(9, "0"))
    return seconds * 1_000_000_000 + ns


def seconds_to_ns(text: str) -> int:
    """Exact nanoseconds of a decimal number of seconds (``1714557600.000123``). Seconds that
    are not finite or whose nanoseconds an int64 cannot hold (beyond about 292 years from 1970)
    raise ValueError, like text that is not a number."""
    m = _DECIMAL.fullmatch(text.strip())
    if m is None:
        try:  # exponent notation: float precision is all there is
            seconds = float(text)
        except ValueError:
            raise ValueError(f"not a number of seconds: {text!r}") from None
        ns = round(seconds * 1e9) if math.isfinite(seconds) else 2**63
        if not -(2**63) <= ns < 2**63:
            raise ValueError(f"seconds beyond int64 nanoseconds: {text!r}")
        return ns
    whole, frac = m.groups()
    ns = int(whole) * 1_000_000_000 + int((frac or "0")[:9].ljust(9, "0"))
    if ns >= 2**63:
        raise ValueError(f"seconds beyond int64 nanoseconds: {text!r}")
    return -ns if text.strip().startswith("-") else ns


def midnight_ns(date: str | Any | None, utc_offset_s: int = 0) -> int:
    """Epoch ns of the midnight starting ``date`` (``YYYY-MM-DD`` or a date) on a clock
    ``utc_offset_s`` ahead of UTC; 0 when ``date`` is None."""
    if date is None:
        return 0
    if isinstance(date, str):
        try:
            date = datetime.strptime(date, "%Y-%m-%d").date()
        except ValueError:
            raise InputError(f"not a date (YYYY-MM-DD): {date!r}") from None
    d = datetime(date.year, date.month, date.day, tzinfo=UTC)
    return (calendar.timegm(d.timetuple()) - utc_offset_s) * 1_000_000_000


def event_time_ns(value: Any) -> int:
    """An event's ``time``: int ns, float seconds, or an ISO-8601 / numeric string."""
    if isinstance(value, bool):
        raise ValueError("a time cannot be a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return seconds_to_ns(repr(value))
    if isinstance(value, str):
        v = value.strip()
        if ascii_digits(v.lstrip("-")):
            return int(v)
        if _DECIMAL.fullmatch(v):
            return seconds_to_ns(v)
        return iso_to_ns(v)
    raise ValueError(f"a time must be a number or a string, got {type(value).__name__}")


def content_checksum(data: bytes) -> int:
    """CRC-32 of a datagram's (printed) content: what the two ends of a datagram share."""
    return zlib.crc32(data)


# --- JSON lines ----------------------------------------------------------------------------------

SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")


def read_event_lines(  # noqa: C901, PLR0912, PLR0915
    path: str | Path, *, host: str | None = None, node_per_pid: bool = False
) -> SocketEvents:
    """Read one JSON-lines socket-event file (format in the module docstring).

    ``host`` is the default for events without one. Malformed lines raise
    :class:`~tacit.errors.InputError` naming file and line.
    """
    src = str(path)
    b = SocketEventsBuilder(src)
    fds: dict[str, FdTable] = {}
    for lineno, obj in iter_json_lines(path):
        b.count("lines")
        b.count("event")
        r = RecordReader(src, f"line {lineno}")
        obj = r.obj(obj, "a socket event")
        call = r.string(obj, "call").lower()
        kind = KIND_CODES.get(call, CALL_ALIASES.get(call))
        if kind is None:
            raise r.fail(f"unknown call {call!r}: expected one of {', '.join(KIND_CODES)}")
        try:
            t = event_time_ns(obj.get("time"))
        except ValueError as e:
            raise r.fail(f"field 'time': {e}") from None
        h = r.string(obj, "host", default=host)
        if h is None:
            raise r.fail("missing field 'host' (or pass host=)")
        pid = r.integer(obj, "pid", default=0)
        fd = r.integer(obj, "fd")
        local = _address(r, obj, "local")
        remote = _address(r, obj, "remote")
        proto_name = r.string(obj, "proto", default=None)
        proto = PROTO_CODES.get(proto_name.lower()) if proto_name else None
        if proto_name and proto is None:
            raise r.fail(f"field 'proto' must be tcp or udp, got {proto_name!r}")
        nbytes = r.integer(obj, "bytes", default=None)
        if kind in (SEND, RECV) and (nbytes is None or nbytes < 0):
            raise r.fail(f"a {KIND_NAMES[kind]} needs a non-negative 'bytes'")
        checksum = obj.get("checksum")
        if isinstance(checksum, str):
            checksum = content_checksum(checksum.encode())
        elif checksum is None:
            checksum = NO_CHECKSUM
        elif not isinstance(checksum, int) or isinstance(checksum, bool):
            raise r.fail("field 'checksum' must be an integer, a string or null")
        node = r.string(obj, "node", default=None) or (f"{h}:{pid}" if node_per_pid else h)

        table = fds.setdefault(h, FdTable())
        sock = None if kind in (CONNECT, ACCEPT) else table.get(pid, fd)
        if sock is None:
            sock = b.new_socket(TCP if proto is None else proto)
            table.open(pid, fd, sock)
        elif proto is not None:
            b.sock_proto[sock] = proto
        b.set_address(sock, local=local)
        if kind in (CONNECT, ACCEPT) or b.sock_proto[sock] == TCP:
            b.set_address(sock, remote=remote)
        b.add(
            time=t,
            host=b.strings.code(h),
            node=b.strings.code(node),
            pid=pid,
            fd=fd,
            sock=sock,
            kind=kind,
            record=lineno,
            nbytes=nbytes or 0,
            remote=remote,
            checksum=checksum,
        )
        if kind == CLOSE:
            table.close(pid, fd)
    return b.build()


def _address(r: RecordReader, obj: dict, key: str) -> str | None:
    v = r.string(obj, key, default=None)
    if v is None or v == "":
        return None
    try:
        ip, port = split_addr(v)
    except ValueError as e:
        raise r.fail(f"field {key!r}: {e}") from None
    return format_addr(ip, port)


def event_lines(events: SocketEvents) -> Iterable[bytes]:
    """The JSON lines of ``events`` (time as int ns)."""
    s = events.strings
    for i in range(len(events)):
        obj = {
            "time": int(events.time[i]),
            "host": s[int(events.host[i])],
            "node": s[int(events.node[i])],
            "pid": int(events.pid[i]),
            "fd": int(events.fd[i]),
            "call": KIND_NAMES[int(events.kind[i])],
            "bytes": int(events.bytes[i]),
            "local": s[int(events.local[i])],
            "remote": s[int(events.remote[i])],
            "proto": PROTO_NAMES.get(int(events.proto[i])),
            "checksum": None if events.checksum[i] == NO_CHECKSUM else int(events.checksum[i]),
        }
        yield orjson.dumps(obj)


def write_event_lines(path: str | Path, events: SocketEvents) -> None:
    """Write ``events`` as JSON lines (gzip when the name ends in ``.gz``)."""
    write_bytes(path, b"".join(line + b"\n" for line in event_lines(events)))

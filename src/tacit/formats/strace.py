"""strace logs of socket calls, read into :class:`~tacit.model.socket_events.SocketEvents`.

WAP5 (Reynolds et al., WWW '06, §4) intercepts each traced process's socket calls; strace gives
the same record without touching the program::

    strace -f -tt -T -yy -e trace=network,read,write,close -o HOST.PID.strace -p PID

What is read:

- **Line prefixes.** ``[pid  123] `` or ``123 `` (``-f``; the first with output on the terminal,
  the second with ``-o``) or none (one process: the pid is the one in the file name, else 0);
  then a ``-tt`` wall-clock time ``HH:MM:SS.ffffff`` of a day the log does not record (``date``
  gives it, in the log's local time ``utc_offset_s`` ahead of UTC; without it times count from
  midnight; a time more than 12 h earlier than the previous one starts the next day), or a
  ``-ttt`` epoch time ``1714557600.000123``, or a ``-t`` time without fraction.
- **Calls.** ``socket``, ``connect`` (a non-blocking ``EINPROGRESS`` counts as connected),
  ``accept``/``accept4``, ``bind``, ``listen``, ``getsockname``/``getpeername`` (addresses only),
  ``read``/``recv``/``recvfrom``/``recvmsg``/``readv``, ``write``/``send``/``sendto``/
  ``sendmsg``/``writev``/``sendfile``, ``sendmmsg``/``recvmmsg`` (one event per datagram),
  ``close``, ``shutdown``. A call split by another process's
  output (``read(5, <unfinished ...>`` ... ``<... read resumed>"..", 4096) = 34``) is joined.
- **Times of events.** strace stamps a line with the time the call *started*. Sends,
  connects, binds, listens, shutdowns and closes keep that stamp (the bytes leave when the write
  is issued). Receives and accepts are stamped when the call *returned* (the data had arrived):
  the start plus the ``-T`` duration when the log has one, else the time of the ``resumed``
  line of a split call, else the start, which for a read that blocked is early by its wait:
  trace with ``-T`` (``-tt -T``) for exact receive times. ``record`` is the line of the stamp
  (the ``resumed`` line for receives).
- **Which fds are sockets.** With ``-yy`` every fd says what it is (``3<TCP:[a:1->b:2]>``,
  ``5<UDP:[a:1]>``, ``7</etc/passwd>``), and sockets opened before strace attached are picked
  up. Without it, sockets are those created by ``socket``/``accept`` (or addressed by
  ``connect``/``bind``/``getsockname``) in the log, tracked per pid with fd reuse after close
  (:class:`~tacit.formats.socketevents.FdTable`); reads and writes on other fds are counted as
  "not a socket".
- **Datagram content.** For datagram (and unknown-protocol) sockets the payload strace printed
  is decoded and the CRC-32 of its first :data:`CHECKSUM_BYTES` bytes (strace's default ``-s``)
  stored as ``checksum``, which is how the two ends of a datagram are told apart from others of
  the same size. Both ends must be traced with ``-s`` at least that large.

Every line is accounted for in ``SocketEvents.accounting`` under one reason (``event``,
``not a socket``, ``failed call``, ``signal``, ...; they sum to ``lines``). A line that is not
strace output raises :class:`~tacit.errors.InputError` naming file and line, except a truncated
last line (no newline), which is counted.

Nodes (WAP5 §2.5): a log is one traced program, so every event of it belongs to the node
``host:program`` (``program`` or the PID in the file name ``HOST.PID.strace``), or ``host``
when neither is known; ``names`` maps pids to programs when one log holds several, and
``node_per_pid`` makes each pid its own node ``host:pid``.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tacit.errors import InputError
from tacit.formats.socketevents import FdTable, content_checksum, midnight_ns
from tacit.formats.textio import read_text
from tacit.model.socket_events import (
    ACCEPT,
    BIND,
    CLOSE,
    CONNECT,
    LISTEN,
    NO_CHECKSUM,
    RECV,
    SEND,
    SHUTDOWN,
    TCP,
    UDP,
    UNKNOWN_PROTO,
    SocketEvents,
    SocketEventsBuilder,
    format_addr,
)
from tacit.model.spans import NONE

SUFFIXES = (".strace", ".strace.gz")
CHECKSUM_BYTES = 32
"""Datagram payload bytes covered by ``checksum`` (strace prints 32 unless given ``-s``)."""

_NS = 1_000_000_000
_DAY_NS = 86_400 * _NS

_PREFIX = re.compile(
    r"\s*(?:\[pid\s+(\d+)\]\s*|(\d+)\s+)?"
    r"(?:(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?|(\d+)\.(\d{1,9}))\s+"
)
_CALL = re.compile(r"(\w+)\(")
_RESUMED = re.compile(r"<\.\.\. (\w+) resumed>\s?")
_UNFINISHED = "<unfinished ...>"
_RESULT = re.compile(
    r"(-?\d+|0x[0-9a-fA-F]+)(?:<(\S*)>)?"
    r"(?:\s+(E[A-Z0-9_]+)(?:\s+\(.*\))?)?(?:\s+\(.*\))?(?:\s+<(\d+)(?:\.(\d{1,9}))?>)?\s*$"
)
_FD = re.compile(r"\s*(-?\d+)(?:<(.*?)>(?=\s*,|\s*$))?")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_IOV_STRING = re.compile(r'iov_base="((?:[^"\\]|\\.)*)"')
_INET = re.compile(r'sin_port=htons\((\d+)\),\s*sin_addr=inet_addr\("([^"]*)"\)')
_INET6 = re.compile(r'sin6_port=htons\((\d+)\).*?inet_pton\(AF_INET6,\s*"([^"]*)"')
_FAMILY = re.compile(r"sa_family=(AF_\w+)")
_ANNOTATION = re.compile(r"([A-Za-z][\w-]*):\[(.*)\]")
_IP_SOCKET_TYPES = {"TCP": TCP, "TCPv6": TCP, "UDP": UDP, "UDPv6": UDP, "UDPLITE": UDP}
_SHUTDOWN_HOW = {"SHUT_RD": 0, "SHUT_WR": 1, "SHUT_RDWR": 2}

_PLAIN_DATA_CALLS = frozenset(
    {"read", "write", "send", "recv", "readv", "writev", "sendfile", "sendfile64"}
)
_SEND_CALLS = frozenset({"write", "send", "sendto", "sendmsg", "writev", "sendfile", "sendfile64"})
_RECV_CALLS = frozenset({"read", "recv", "recvfrom", "recvmsg", "readv"})
_UNSUPPORTED = frozenset({"splice", "vmsplice", "tee", "copy_file_range"})
_MSG_LEN = re.compile(r"msg_len=(\d+)")

NOT_A_SOCKET = "not a socket"
NON_IP = "non-IP socket"


def host_from_filename(path: str | Path) -> tuple[str, int | None]:
    """(host, pid) from the naming convention ``HOST.PID.strace`` or ``HOST.strace``.

    Other names give their stem (the name without ``.gz`` and its last suffix) and no pid.
    """
    name = Path(path).name
    if name.endswith(".gz"):
        name = name[:-3]
    stem = name[: -len(".strace")] if name.endswith(".strace") else name.rsplit(".", 1)[0]
    head, dot, tail = stem.rpartition(".")
    if dot and head and tail.isdigit():
        return head, int(tail)
    return stem or name, None


def read_strace(
    path: str | Path,
    *,
    host: str | None = None,
    date: Any = None,
    utc_offset_s: int = 0,
    program: str | None = None,
    names: Mapping[int, str] | None = None,
    node_per_pid: bool = False,
) -> SocketEvents:
    """Read one strace log (gzip or not) into socket events; see the module docstring.

    ``host`` names the machine (default: from the file name); ``date`` (``YYYY-MM-DD`` or a
    date) anchors ``-tt`` times; ``program``, ``names`` and ``node_per_pid`` name the nodes.
    """
    file_host, file_pid = host_from_filename(path)
    parser = _Parser(
        str(path),
        host=host or file_host,
        default_pid=file_pid if file_pid is not None else 0,
        program=program if program is not None else (str(file_pid) if file_pid else None),
        names=names or {},
        node_per_pid=node_per_pid,
        base_ns=midnight_ns(date, utc_offset_s),
    )
    return parser.parse(read_text(path))


def looks_like_strace(text: str) -> bool:
    """Whether the first non-blank line of ``text`` is a timestamped strace line."""
    for line in text.splitlines():
        if line.strip():
            m = _PREFIX.match(line)
            if m is None:
                return line.startswith("strace: ")
            rest = line[m.end() :]
            return bool(_CALL.match(rest) or rest.startswith(("+++", "---", "<...")))
    return False


class _Parser:
    """The state of reading one log: fd tables, pending split calls, the day of ``-tt`` times."""

    def __init__(
        self,
        source: str,
        *,
        host: str,
        default_pid: int,
        program: str | None,
        names: Mapping[int, str],
        node_per_pid: bool,
        base_ns: int,
    ) -> None:
        self.source = source
        self.b = SocketEventsBuilder(source)
        self.host = host
        self.host_code = self.b.strings.code(host)
        self.default_pid = default_pid
        self.program = program
        self.names = names
        self.node_per_pid = node_per_pid
        self.base_ns = base_ns
        self.day_ns = 0
        self.last_tod = -1
        self.fds = FdTable()
        self.nonip = FdTable()
        self._nonip_count = 0
        self.pending: dict[tuple[int, str], tuple[int, int, str]] = {}
        self._nodes: dict[int, int] = {}

    # --- the loop -------------------------------------------------------------------------------

    def parse(self, text: str) -> SocketEvents:
        lines = text.split("\n")
        terminated = lines[-1] == ""
        if terminated:
            lines.pop()
        last = len(lines)
        count = self.b.count
        count("lines", len(lines))
        for lineno, line in enumerate(lines, start=1):
            try:
                self._line(line, lineno)
            except _Malformed as e:
                if lineno == last and not terminated:
                    count("truncated last line")
                    continue
                preview = line if len(line) <= 100 else line[:97] + "..."
                raise InputError(
                    f"{e.reason}: {preview!r}", path=self.source, record=f"line {lineno}"
                ) from None
        for _ in self.pending:
            count("unfinished at end of log")
        return self.b.build()

    def _line(self, line: str, lineno: int) -> None:  # noqa: C901, PLR0912
        count = self.b.count
        m = _PREFIX.match(line)
        if m is None:
            if not line.strip():
                count("blank")
            elif line.startswith("strace: "):
                count("strace message")
            else:
                raise _Malformed("not strace -tt/-ttt output (no timestamp)")
            return
        p1, p2, hh, mm, ss, frac, es, efrac = m.groups()
        pid = int(p1 or p2) if (p1 or p2) else self.default_pid
        if hh is not None:
            tod = (int(hh) * 3600 + int(mm) * 60 + int(ss)) * _NS
            if frac:
                tod += int(frac.ljust(9, "0"))
            if tod < self.last_tod - _DAY_NS // 2:
                self.day_ns += _DAY_NS
            self.last_tod = tod
            t = self.base_ns + self.day_ns + tod
        else:
            t = int(es) * _NS + int(efrac.ljust(9, "0"))
        body = line[m.end() :]
        if body.startswith("+++"):
            count("exit")
            return
        if body.startswith("---"):
            count("signal")
            return
        r = _RESUMED.match(body)
        if r is not None:
            name = r.group(1)
            start = self.pending.pop((pid, name), None)
            if start is None:
                count("resumed without start")
                return
            count("call start (resumed later)")
            self._call(name, start[2] + body[r.end() :], pid, start[0], start[1], t, lineno)
            return
        c = _CALL.match(body)
        if c is None:
            raise _Malformed("not a system call")
        name = c.group(1)
        rest = body[c.end() :]
        if rest.rstrip().endswith(_UNFINISHED):
            if (pid, name) in self.pending:
                count("unfinished, never resumed")
            self.pending[(pid, name)] = (t, lineno, rest.rstrip()[: -len(_UNFINISHED)])
            return
        self._call(name, rest, pid, t, lineno, t, lineno)

    # --- one call --------------------------------------------------------------------------------

    def _call(
        self, name: str, text: str, pid: int, t0: int, line0: int, t1: int, line1: int
    ) -> None:
        """A whole call: ``text`` is everything after ``name(``; started at (t0, line0) and
        returned at (t1, line1)."""
        count = self.b.count
        handler = _HANDLERS.get(name)
        if handler is None:
            count("unsupported call" if name in _UNSUPPORTED else "other call")
            return
        eq = text.rfind(" = ")
        if eq < 0:
            raise _Malformed(f"{name} without a result")
        args = text[:eq].rstrip()
        if not args.endswith(")"):
            raise _Malformed(f"{name} without a result")
        args = args[:-1]
        result = text[eq + 3 :].strip()
        if result.isdigit():  # the common case: a plain success
            handler(self, name, args, int(result), None, pid, t0, line0, t1, line1)
            return
        if result.startswith("?"):
            count("no result")
            return
        rm = _RESULT.match(result)
        if rm is None:
            raise _Malformed(f"unreadable result of {name}")
        ret = int(rm.group(1), 0)
        errno = rm.group(3)
        if ret < 0 and not (name == "connect" and errno == "EINPROGRESS"):
            count("failed call")
            return
        if rm.group(4) is not None:  # -T: the call returned this long after it started
            t1 = t0 + int(rm.group(4)) * _NS + int((rm.group(5) or "0").ljust(9, "0"))
        handler(self, name, args, ret, rm.group(2), pid, t0, line0, t1, line1)

    def _fd(self, args: str, name: str) -> tuple[int, str | None, str]:
        head, comma, rest = args.partition(",")
        if head.isdigit():  # the common case, without -y
            return int(head), None, comma + rest
        m = _FD.match(args)
        if m is None:
            raise _Malformed(f"{name} without a file descriptor")
        return int(m.group(1)), m.group(2), args[m.end() :]

    def _node(self, pid: int) -> int:
        code = self._nodes.get(pid)
        if code is None:
            if pid in self.names:
                name = f"{self.host}:{self.names[pid]}"
            elif self.node_per_pid:
                name = f"{self.host}:{pid}"
            elif self.program:
                name = f"{self.host}:{self.program}"
            else:
                name = self.host
            code = self._nodes[pid] = self.b.strings.code(name)
        return code

    def _emit(
        self,
        t: int,
        pid: int,
        fd: int,
        sock: int,
        kind: int,
        record: int,
        nbytes: int = 0,
        remote: str | None = None,
        checksum: int = NO_CHECKSUM,
        line_done: bool = True,
    ) -> None:
        """Append one event; ``line_done`` counts its line (False for all but the last event
        of a line that holds several)."""
        b = self.b
        if line_done:
            b.accounting["event"] = b.accounting.get("event", 0) + 1
        b.append(
            t,
            self.host_code,
            self._node(pid),
            pid,
            fd,
            sock,
            kind,
            record,
            nbytes,
            NONE if remote is None else b.strings.code(remote),
            checksum,
        )

    def _new_ip_socket(
        self, pid: int, fd: int, proto: int, local: str | None = None, remote: str | None = None
    ) -> int:
        sock = self.b.new_socket(proto, local, remote)
        self.fds.open(pid, fd, sock)
        self.nonip.forget(pid, fd)
        return sock

    def _new_nonip_socket(self, pid: int, fd: int) -> None:
        self._nonip_count += 1
        self.nonip.open(pid, fd, self._nonip_count)
        self.fds.forget(pid, fd)

    def _socket_of(self, pid: int, fd: int, annotation: str | None) -> int | str:
        """The socket on ``fd``, or the reason it is not one we follow."""
        if annotation is not None:
            kind, proto, local, remote = _annotation(annotation)
            if kind == "file":
                self.fds.forget(pid, fd)
                self.nonip.forget(pid, fd)
                return NOT_A_SOCKET
            if kind == "nonip":
                self._new_nonip_socket(pid, fd)
                return NON_IP
            sock = self.fds.get(pid, fd)
            b = self.b
            known_local = b.strings[b.sock_local[sock]] if sock is not None else None
            if sock is None or (local and known_local and local != known_local and remote):
                return self._new_ip_socket(pid, fd, proto, local, remote)
            if proto != UNKNOWN_PROTO:
                b.sock_proto[sock] = proto
            b.set_address(sock, local=local, remote=remote)
            return sock
        sock = self.fds.get(pid, fd)
        if sock is not None:
            return sock
        return NON_IP if self.nonip.get(pid, fd) is not None else NOT_A_SOCKET


class _Malformed(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _annotation(text: str) -> tuple[str, int, str | None, str | None]:
    """What a ``-y``/``-yy`` fd annotation says: (``ip``/``nonip``/``file``, protocol, local,
    remote)."""
    m = _ANNOTATION.fullmatch(text)
    if m is None:
        return "file", UNKNOWN_PROTO, None, None
    typ, inner = m.groups()
    if typ == "socket":
        return "ip", UNKNOWN_PROTO, None, None
    proto = _IP_SOCKET_TYPES.get(typ)
    if proto is None:
        return ("nonip" if typ.isupper() or typ.startswith("UNIX") else "file"), -1, None, None
    if inner.isdigit():  # an inode: not bound or connected yet
        return "ip", proto, None, None
    local, sep, remote = inner.partition("->")
    return "ip", proto, _norm_addr(local), _norm_addr(remote) if sep else None


def _norm_addr(text: str) -> str | None:
    ip, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return format_addr(ip.strip("[]"), int(port))


def _sockaddr(text: str) -> tuple[str | None, str | None]:
    """(family, ``ip:port``) of the first socket address printed in ``text``."""
    m = _INET.search(text)
    if m is not None:
        return "AF_INET", format_addr(m.group(2), int(m.group(1)))
    m = _INET6.search(text)
    if m is not None:
        return "AF_INET6", format_addr(m.group(2), int(m.group(1)))
    f = _FAMILY.search(text)
    return (f.group(1) if f else None), None


def _checksum(strings: list[str]) -> int:
    data = b"".join(codecs.escape_decode(s.encode("utf-8", "surrogateescape"))[0] for s in strings)
    return content_checksum(data[:CHECKSUM_BYTES])


# --- handlers, one per call family ----------------------------------------------------------------


def _on_socket(p: _Parser, name, args, ret, ret_ann, pid, t0, line0, t1, line1) -> None:
    family, _, rest = args.partition(",")
    ip = family.strip() in ("AF_INET", "AF_INET6")
    proto = TCP if "SOCK_STREAM" in rest else UDP if "SOCK_DGRAM" in rest else None
    p.b.count("socket created")
    if ip and proto is not None:
        local = remote = None
        if ret_ann:
            _, _, local, remote = _annotation(ret_ann)
        p._new_ip_socket(pid, ret, proto, local, remote)
    else:
        p._new_nonip_socket(pid, ret)


def _on_connect(p: _Parser, name, args, ret, ret_ann, pid, t0, line0, t1, line1) -> None:
    fd, ann, rest = p._fd(args, name)
    _, addr = _sockaddr(rest)
    sock = p._socket_of(pid, fd, ann)
    if sock == NOT_A_SOCKET and addr is not None:
        sock = p._new_ip_socket(pid, fd, UNKNOWN_PROTO)  # opened before the log started
    if isinstance(sock, str):
        p.b.count(sock)
        return
    if addr is None:  # AF_UNSPEC: a datagram socket dissolving its association
        p.b.count("other call")
        return
    p.b.set_address(sock, remote=addr)
    p._emit(t0, pid, fd, sock, CONNECT, line0, remote=addr)


def _on_accept(p: _Parser, name, args, ret, ret_ann, pid, t0, line0, t1, line1) -> None:
    lfd, ann, rest = p._fd(args, name)
    _, peer = _sockaddr(rest)
    listener = p._socket_of(pid, lfd, ann)
    if listener == NON_IP:
        p._new_nonip_socket(pid, ret)
        p.b.count(NON_IP)
        return
    local = remote = None
    if ret_ann:
        kind, _, local, remote = _annotation(ret_ann)
        if kind == "nonip":
            p._new_nonip_socket(pid, ret)
            p.b.count(NON_IP)
            return
    if local is None and isinstance(listener, int):
        local = p.b.strings[p.b.sock_local[listener]]
        p.b.sock_proto[listener] = TCP
    sock = p._new_ip_socket(pid, ret, TCP, local, remote or peer)
    p._emit(t1, pid, ret, sock, ACCEPT, line1)


def _addressed_socket(p: _Parser, name, args, pid) -> tuple[int, int | None, str | None]:
    """The fd, socket and address of a call naming one (bind, getsockname, getpeername): an fd
    not known as a socket that comes with an IP address is one opened before tracing began.
    The socket is None (and the reason counted) when the fd is no IP socket."""
    fd, ann, rest = p._fd(args, name)
    _, addr = _sockaddr(rest)
    sock = p._socket_of(pid, fd, ann)
    if sock == NOT_A_SOCKET and addr is not None:
        sock = p._new_ip_socket(pid, fd, UNKNOWN_PROTO)
    if isinstance(sock, str):
        p.b.count(sock)
        return fd, None, addr
    return fd, sock, addr


def _on_bind(p: _Parser, name, args, ret, ret_ann, pid, t0, line0, t1, line1) -> None:
    fd, sock, addr = _addressed_socket(p, name, args, pid)
    if sock is None:
        return
    if addr is not None:
        p.b.set_address(sock, local=addr)
    p._emit(t0, pid, fd, sock, BIND, line0)


def _on_listen(p: _Parser, name, args, ret, ret_ann, pid, t0, line0, t1, line1) -> None:
    fd, ann, _ = p._fd(args, name)
    sock = p._socket_of(pid, fd, ann)
    if isinstance(sock, str):
        p.b.count(sock)
        return
    p.b.sock_proto[sock] = TCP
    p._emit(t0, pid, fd, sock, LISTEN, line0)


def _on_sockname(p: _Parser, name, args, ret, ret_ann, pid, t0, line0, t1, line1) -> None:
    _, sock, addr = _addressed_socket(p, name, args, pid)
    if sock is None:
        return
    p.b.count("address lookup")
    if addr is not None:
        if name == "getsockname":
            p.b.set_address(sock, local=addr)
        else:
            p.b.set_address(sock, remote=addr)


def _on_shutdown(p: _Parser, name, args, ret, ret_ann, pid, t0, line0, t1, line1) -> None:
    fd, ann, rest = p._fd(args, name)
    sock = p._socket_of(pid, fd, ann)
    if isinstance(sock, str):
        p.b.count(sock)
        return
    how = _SHUTDOWN_HOW.get(rest.strip(" ,"), 2)
    p._emit(t0, pid, fd, sock, SHUTDOWN, line0, nbytes=how)


def _on_close(p: _Parser, name, args, ret, ret_ann, pid, t0, line0, t1, line1) -> None:
    fd, ann, _ = p._fd(args, name)
    sock = p._socket_of(pid, fd, ann)
    if isinstance(sock, str):
        p.nonip.close(pid, fd)
        p.b.count(sock)
        return
    p.fds.close(pid, fd)
    p._emit(t0, pid, fd, sock, CLOSE, line0)


def _on_data(p: _Parser, name, args, ret, ret_ann, pid, t0, line0, t1, line1) -> None:  # noqa: C901, PLR0912
    fd, ann, rest = p._fd(args, name)
    sock = p._socket_of(pid, fd, ann)
    if isinstance(sock, str):
        p.b.count(sock)
        return
    if ret == 0:
        p.b.count("zero bytes")
        return
    b = p.b
    remote = None
    strings: list[str] = []
    stream = b.sock_proto[sock] == TCP
    if stream and name in _PLAIN_DATA_CALLS:
        pass  # neither an address nor a checksum to read
    elif name in ("sendto", "recvfrom"):
        m = _STRING.search(rest)
        if m is not None:
            strings.append(m.group(1))
            _, remote = _sockaddr(rest[m.end() :])
        else:
            _, remote = _sockaddr(rest)
    elif name in ("sendmsg", "recvmsg"):
        cut = rest.find("msg_iov")
        _, remote = _sockaddr(rest if cut < 0 else rest[:cut])
        strings = _IOV_STRING.findall(rest)
    elif name in ("writev", "readv"):
        strings = _IOV_STRING.findall(rest)
    elif name not in ("sendfile", "sendfile64"):
        m = _STRING.search(rest)
        if m is not None:
            strings.append(m.group(1))
    if remote is not None and b.sock_proto[sock] == UNKNOWN_PROTO:
        b.sock_proto[sock] = UDP  # a per-call address: a datagram socket
    checksum = NO_CHECKSUM
    if b.sock_proto[sock] != TCP and strings:
        checksum = _checksum(strings)
    if name in _SEND_CALLS:
        p._emit(t0, pid, fd, sock, SEND, line0, nbytes=ret, remote=remote, checksum=checksum)
    else:
        p._emit(t1, pid, fd, sock, RECV, line1, nbytes=ret, remote=remote, checksum=checksum)


def _on_mmsg(p: _Parser, name, args, ret, ret_ann, pid, t0, line0, t1, line1) -> None:
    """``sendmmsg``/``recvmmsg``: ``ret`` datagrams in one call, one event each."""
    fd, ann, rest = p._fd(args, name)
    sock = p._socket_of(pid, fd, ann)
    if isinstance(sock, str):
        p.b.count(sock)
        return
    parts = rest.split("{msg_hdr=")[1 : ret + 1]
    sending = name == "sendmmsg"
    emitted = 0
    for part in parts:
        m = _MSG_LEN.findall(part)
        nbytes = int(m[-1]) if m else 0
        if not nbytes:
            continue
        cut = part.find("msg_iov")
        _, remote = _sockaddr(part if cut < 0 else part[:cut])
        if remote is not None and p.b.sock_proto[sock] == UNKNOWN_PROTO:
            p.b.sock_proto[sock] = UDP
        strings = _IOV_STRING.findall(part)
        checksum = _checksum(strings) if strings and p.b.sock_proto[sock] != TCP else NO_CHECKSUM
        emitted += 1
        p._emit(
            t0 if sending else t1,
            pid,
            fd,
            sock,
            SEND if sending else RECV,
            line0 if sending else line1,
            nbytes=nbytes,
            remote=remote,
            checksum=checksum,
            line_done=emitted == 1,
        )
    if not emitted:
        p.b.count("zero bytes")


_HANDLERS = {
    "sendmmsg": _on_mmsg,
    "recvmmsg": _on_mmsg,
    "socket": _on_socket,
    "connect": _on_connect,
    "accept": _on_accept,
    "accept4": _on_accept,
    "bind": _on_bind,
    "listen": _on_listen,
    "getsockname": _on_sockname,
    "getpeername": _on_sockname,
    "shutdown": _on_shutdown,
    "close": _on_close,
    **{n: _on_data for n in _SEND_CALLS | _RECV_CALLS},
}

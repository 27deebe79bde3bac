"""Trace reconciliation: socket events of traced processes become messages (WAP5 §4).

Reynolds et al., "WAP5: Black-box Performance Debugging for Wide-Area Systems", WWW '06. WAP5
traces the socket calls of each process separately; reconciliation pairs the two ends of every
connection across logs and cuts the byte streams into messages, each with the send time on the
sender's clock and the receive time on the receiver's (:data:`~tacit.model.messages.MISSING`
where that end was not traced).

**TCP.**

- *Pairing the ends of a connection.* Two traced sockets are the two ends of one connection
  when each one's remote address is the other's local address. Addresses come from ``-yy``,
  ``getsockname``/``getpeername``, ``connect`` and ``accept``; an unknown or wildcard IP is
  compatible with any IP its host is known to own (or any IP when none is known); a loopback
  IP only with sockets of the same host (logs of one machine must carry one host name). When
  all four ports are known the match is exact (``tcp connections matched exactly``), provided
  the two ends' traced lifetimes are within ``connect_tolerance_ns`` (ports get reused).
  Otherwise a client ``connect(remote=S)`` is paired with a server ``accept`` on port S whose
  peer is compatible with the client, in time order: for each connect in order, the first
  unpaired accept within ``connect_tolerance_ns`` of it (either way: the tolerance covers clock
  offset plus network delay, 1 s by default), preferring one whose byte counts agree when both
  ends were seen to close (``tcp connections matched by time``).
- *Messages* (§2.3, "fat messages"): a maximal run of bytes in one direction. On each end, a
  run of writes not interrupted by a read on the same socket is one message, and so is a run of
  reads not interrupted by a write. With both ends traced, the two ends' runs are aligned by
  byte offset in each direction and the message boundaries are the union of both ends' run
  boundaries (they coincide for request/response traffic; a pipelined batch written at once
  but read in two runs becomes two messages). Send time = the write holding the message's first
  byte; receive time = the read that completes its last byte; size = its bytes; record = the
  line of that write (else of that read).
- *Offsets.* When both ends were traced from the connection's open (``connect``/``accept``
  seen) offsets start at 0. Otherwise (strace attached to running processes) the ends are
  aligned by their sequences of (direction, size) runs; when no alignment is found the
  connection is counted under ``tcp connections not aligned`` and each direction is taken from
  its sender alone (receive times MISSING, the receiver's reads skipped).
- ``flow`` numbers connections; both directions of one share it.

**UDP.** Each datagram is a message. A receive is matched to a send of the same size and
content checksum whose addresses are compatible (the send's destination is the receiver's
local address, the receiver's source is the sender's local address, where known), within
``datagram_tolerance_ns`` of each other: the earliest such send not yet received by this
receiving socket (FIFO). A receive whose only candidates were already received by the same
socket is a *duplicate* (counted, no message). A send received by no traced socket although
a traced socket was bound to its destination over that time is *lost* (a message with receive
time MISSING, counted). A datagram is *reordered* when a datagram sent after it on the same
socket pair was received before it (RFC 4737's definition). A send to an untraced destination
is a message with receive time MISSING, a receive from an untraced source one with send time
MISSING. ``flow`` numbers the pair of sockets (or socket and untraced address) that exchange
datagrams, in both directions.

**Nodes and endpoints** (§2.5, Table 1; §2.5.1 client aggregation). A traced process is the
node its reader named (``host:program`` or ``host``). An untraced peer is named by its
address: a server (the peer of a ``connect``; for datagrams and unopened connections, a port
below ``ephemeral_port_min`` or one seen listening, bound, or connected to anywhere in the
input) is the node ``ip:port``; an untraced client (the peer of an ``accept``, or an ephemeral
port) is aggregated as WAP5 does: one node per IP (``client_aggregation="ip"``, the default),
one node ``clients`` for all (``"all"``), or not at all (``"none"``: ``ip:port``). A peer
whose address no event shows is the node ``unknown``. Endpoints are ``ip:port`` (a wildcard
local IP is replaced by the address the peer saw, or the host's only known IP). Hosts are the
traced log's host; for an untraced peer, its IP.

Every input event is accounted for in :attr:`Reconciliation.accounting`: ``events`` equals
``events used`` (sends and receives that are part of a message) plus ``lifecycle events``
(connect, accept, close, bind, listen, shutdown) plus the ``skipped: ...`` counts.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from tacit.errors import ConfigError
from tacit.model.messages import MISSING, MessageTable
from tacit.model.socket_events import (
    ACCEPT,
    BIND,
    CLOSE,
    CONNECT,
    LISTEN,
    RECV,
    SEND,
    UDP,
    WILDCARD_IPS,
    SocketEvents,
    format_addr,
    split_addr,
)
from tacit.model.spans import NONE, StringPool
from tacit.runs import distinct, run_heads, run_starts

CLIENT_AGGREGATIONS = ("ip", "all", "none")
_NAME_COLUMNS = ("src", "src_host", "src_endpoint", "dst", "dst_host", "dst_endpoint")

Addr = tuple[str | None, int | None]
"""(ip, port); ip None when unknown or a wildcard, port None when unknown."""


@dataclass(frozen=True)
class ReconcileParams:
    """Parameters of reconciliation (WAP5 §4; naming §2.5).

    ``connect_tolerance_ns``: how far apart (clock offset plus delay) a connect and the accept
    it is paired with may be stamped, when the addresses do not pair them exactly; for exact
    pairs, how far apart the two ends' traced lifetimes may be (ports are reused).
    ``datagram_tolerance_ns``: the same for a datagram's send and receive. WAP5 needs neither
    (its interposition library sees both ends' socket identities); 1 s covers NTP-synchronised
    clocks and wide-area delays, and should grow with the clock offsets of the logs.
    ``client_aggregation``: how untraced clients are named (§2.5.1): ``ip``, ``all`` or
    ``none``. ``ephemeral_port_min``: ports from here up are clients' (Linux's default range
    starts at 32768).
    """

    connect_tolerance_ns: int = 1_000_000_000
    datagram_tolerance_ns: int = 1_000_000_000
    client_aggregation: str = "ip"
    ephemeral_port_min: int = 32768

    def __post_init__(self) -> None:
        if self.client_aggregation not in CLIENT_AGGREGATIONS:
            raise ConfigError(
                f"client_aggregation must be one of {CLIENT_AGGREGATIONS}, "
                f"got {self.client_aggregation!r}"
            )
        if self.connect_tolerance_ns < 0 or self.datagram_tolerance_ns < 0:
            raise ConfigError("tolerances must be non-negative")


@dataclass
class Reconciliation:
    """Messages reconciled from socket events, and what became of every event."""

    messages: MessageTable
    accounting: dict[str, int] = field(default_factory=dict)


def reconcile(events: SocketEvents, params: ReconcileParams | None = None) -> Reconciliation:
    """Reconcile the socket events of one or more logs into messages (WAP5 §4).

    See the module docstring for the rules. Messages come out in the order of their earliest
    known timestamp.
    """
    return _Reconciler(events, params or ReconcileParams()).run()


# --- sockets -------------------------------------------------------------------------------------


@dataclass
class _Sock:
    id: int
    node: str
    host: str
    proto: int
    local: Addr | None
    remote: Addr | None
    role: int  # CONNECT, ACCEPT or -1
    open_time: int | None
    closed: bool
    listening: bool
    lo: int  # the socket's events are order[lo:hi] (by time)
    hi: int
    first: int
    last: int
    sent: int
    received: int


class _Reconciler:
    def __init__(self, events: SocketEvents, params: ReconcileParams) -> None:
        self.ev = events
        self.p = params
        self.strings = StringPool()
        keys = (*_NAME_COLUMNS, "send", "recv", "size", "flow", "record")
        self._cols: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        self._rows: dict[str, list[int]] = {k: [] for k in keys}
        self.acc: dict[str, int] = {"events": len(events), "events_used": 0, "lifecycle_events": 0}
        self._addr_cache: dict[int, Addr | None] = {}
        self._flows: dict[object, int] = {}
        self.host_ips: dict[str, set[str]] = {}
        self.server_ports: set[int] = set()

    def count(self, key: str, n: int = 1) -> None:
        if n:
            self.acc[key] = self.acc.get(key, 0) + n

    def addr(self, code: int) -> Addr | None:
        if code == NONE:
            return None
        a = self._addr_cache.get(code, ...)
        if a is ...:
            try:
                ip, port = split_addr(self.ev.strings.values[code])
                a = (None if ip in WILDCARD_IPS else ip, port or None)
            except ValueError:
                a = None
            self._addr_cache[code] = a
        return a

    def flow(self, key: object) -> int:
        f = self._flows.get(key)
        if f is None:
            f = self._flows[key] = len(self._flows)
        return f

    # --- the whole run ---------------------------------------------------------------------------

    def run(self) -> Reconciliation:
        ev = self.ev
        kind = ev.kind
        self.count("lifecycle_events", int(np.count_nonzero((kind != SEND) & (kind != RECV))))
        socks = self._sockets()
        for s in socks:
            if s.local is not None and s.local[0] is not None and not _loopback(s.local[0]):
                self.host_ips.setdefault(s.host, set()).add(s.local[0])
        self._learn_server_ports(socks)
        tcp = [s for s in socks if s.proto != UDP]
        udp = [s for s in socks if s.proto == UDP]
        self.count("tcp sockets", len(tcp))
        self.count("udp sockets", len(udp))
        self._tcp(tcp)
        self._udp(udp)
        for k, v in self._rows.items():
            self._cols[k].append(np.asarray(v, dtype=np.int32 if k in _NAME_COLUMNS else np.int64))
        if self._cols["send"]:
            cols = {k: np.concatenate(v) for k, v in self._cols.items()}
            table = MessageTable(self.strings, **cols, sources=list(ev.sources))
        else:
            table = MessageTable.empty(self.strings)
            table.sources = list(ev.sources)
        table = table.take(_time_order(table))
        self.acc["messages"] = len(table)
        return Reconciliation(table, self.acc)

    def _sockets(self) -> list[_Sock]:
        """One summary per socket; ``self.order`` sorts events by (socket, time, record)."""
        ev = self.ev
        n = len(ev)
        self.order = order = np.lexsort((ev.record, ev.time, ev.sock))
        kind = ev.kind[order]
        self.is_data = is_data = (kind == SEND) | (kind == RECV)
        if not n:
            return []
        sock = ev.sock[order]
        starts = run_starts(sock)
        stops = np.r_[starts[1:], n]
        pos = np.arange(n)
        t = ev.time[order]
        nbytes = ev.bytes[order]
        local, remote = ev.local[order], ev.remote[order]
        is_open = (kind == CONNECT) | (kind == ACCEPT)

        def last(mask: np.ndarray) -> np.ndarray:
            return np.maximum.reduceat(np.where(mask, pos, -1), starts)

        open_pos = np.minimum.reduceat(np.where(is_open, pos, n), starts)
        local_pos = last(local != NONE)
        remote_pos = last((remote != NONE) & ~is_data)  # connect/accept say it best
        remote_pos = np.where(remote_pos >= 0, remote_pos, last(remote != NONE))
        columns = zip(
            starts.tolist(),
            stops.tolist(),
            open_pos.tolist(),
            local_pos.tolist(),
            remote_pos.tolist(),
            np.minimum.reduceat(t, starts).tolist(),
            np.maximum.reduceat(t, starts).tolist(),
            np.maximum.reduceat(kind == CLOSE, starts).tolist(),
            np.maximum.reduceat(kind == LISTEN, starts).tolist(),
            np.add.reduceat(is_data.astype(np.int64), starts).tolist(),
            np.add.reduceat(np.where(kind == SEND, nbytes, 0), starts).tolist(),
            np.add.reduceat(np.where(kind == RECV, nbytes, 0), starts).tolist(),
            strict=True,
        )
        out = []
        for lo, hi, op, lp, rp, first, last_t, closed, listens, ndata, sent, received in columns:
            row = int(order[lo])
            out.append(
                _Sock(
                    id=int(sock[lo]),
                    node=ev.name("node", row) or "?",
                    host=ev.name("host", row) or "?",
                    proto=int(ev.proto[row]),
                    local=self.addr(int(local[lp])) if lp >= 0 else None,
                    remote=self.addr(int(remote[rp])) if rp >= 0 else None,
                    role=int(kind[op]) if op < n else -1,
                    open_time=int(t[op]) if op < n else None,
                    closed=bool(closed),
                    listening=bool(listens) and not ndata,
                    lo=lo,
                    hi=hi,
                    first=first,
                    last=last_t,
                    sent=sent,
                    received=received,
                )
            )
        return out

    def data_rows(self, s: _Sock) -> np.ndarray:
        """The socket's send and receive events, in time order."""
        return self.order[s.lo : s.hi][self.is_data[s.lo : s.hi]]

    def _learn_server_ports(self, socks: list[_Sock]) -> None:
        ev = self.ev
        for s in socks:
            if s.role == CONNECT and s.proto != UDP and s.remote and s.remote[1]:
                self.server_ports.add(s.remote[1])
            if s.role == ACCEPT and s.local and s.local[1]:
                self.server_ports.add(s.local[1])
        for row in np.flatnonzero((ev.kind == LISTEN) | (ev.kind == BIND)).tolist():
            a = self.addr(int(ev.local[row]))
            if a is not None and a[1]:
                self.server_ports.add(a[1])

    # --- naming ------------------------------------------------------------------------------

    def peer(self, addr: Addr | None, server: bool | None, own: Addr | None) -> tuple[str, str]:
        """(node, host) of an untraced peer at ``addr``; ``server`` when its role is known."""
        ip, port = addr or (None, None)
        if ip is None:
            return "unknown", "unknown"
        if port is None:
            return ip, ip
        if server is None:
            own_port = own[1] if own else None
            server = port in self.server_ports or (
                port < self.p.ephemeral_port_min and own_port not in self.server_ports
            )
        if server:
            return format_addr(ip, port), ip
        agg = self.p.client_aggregation
        if agg == "ip":
            return ip, ip
        if agg == "all":
            return "clients", ip
        return format_addr(ip, port), ip

    def endpoint(self, own: Addr | None, seen: Addr | None, host: str) -> str | None:
        """A traced socket's ``ip:port``: its own address, else what its peer saw, else its
        port on its host's only known IP."""
        if own is not None and own[0] is not None and own[1]:
            return format_addr(own[0], own[1])
        if (
            seen is not None
            and seen[0] is not None
            and seen[1]
            and (own is None or own[1] is None or own[1] == seen[1])
        ):
            return format_addr(seen[0], seen[1])
        if own is not None and own[1]:
            ips = self.host_ips.get(host)
            ip = next(iter(ips)) if ips and len(ips) == 1 else "0.0.0.0"
            return format_addr(ip, own[1])
        return None

    def compatible(self, seen: Addr | None, own: Addr | None, own_host: str, seen_by: str) -> bool:
        """Whether the address another socket (on host ``seen_by``) saw for a socket of
        ``own_host`` can be that socket's own address ``own``."""
        if seen is None:
            return True
        sip, sport = seen
        if own is not None:
            oip, oport = own
            if oport and sport and oport != sport:
                return False
            if oip is not None and sip is not None:
                return oip == sip or (_loopback(sip) and own_host == seen_by)
        if sip is None:
            return True
        if _loopback(sip):
            return own_host == seen_by
        ips = self.host_ips.get(own_host)
        return not ips or sip in ips

    # --- TCP -----------------------------------------------------------------------------------

    def _tcp(self, socks: list[_Sock]) -> None:
        listening = [s for s in socks if s.listening]
        self.count("tcp listening sockets", len(listening))
        socks = [s for s in socks if not s.listening]
        pairs = self._pair_tcp(socks)
        paired = {s.id for pair in pairs for s in pair}
        conns: list[tuple[_Sock, _Sock | None]] = list(pairs)
        conns += [(s, None) for s in socks if s.id not in paired]
        conns.sort(key=lambda c: min(x.first for x in c if x is not None))
        self.count("tcp connections", len(conns))
        self.count("tcp connections with both ends traced", len(pairs))
        self._tcp_messages(conns)

    def _pair_tcp(self, socks: list[_Sock]) -> list[tuple[_Sock, _Sock]]:  # noqa: C901, PLR0912, PLR0915
        """Pairs of traced sockets that are the two ends of one connection."""
        pairs: list[tuple[_Sock, _Sock]] = []
        used: set[int] = set()
        tol = self.p.connect_tolerance_ns
        # Exact: all four ports known (-yy, getsockname, accept's peer).
        by_ports: dict[tuple[int, int], list[_Sock]] = {}
        for s in socks:
            if s.local and s.remote and s.local[1] and s.remote[1]:
                by_ports.setdefault((s.local[1], s.remote[1]), []).append(s)
        for (lp, rp), group in by_ports.items():
            if lp > rp:
                continue
            partners = by_ports.get((rp, lp), [])
            for s in sorted(group, key=lambda x: x.first):
                if s.id in used:
                    continue
                best = None
                for t in partners:
                    if t.id in used or t is s or not self._ends_compatible(s, t):
                        continue
                    if not (s.first - tol <= t.last and t.first - tol <= s.last):
                        continue  # the same ports reused by another connection
                    gap = abs(_open_or_first(s) - _open_or_first(t))
                    if best is None or gap < best[0]:
                        best = (gap, t)
                if best is not None:
                    used.update((s.id, best[1].id))
                    pairs.append(_client_first(s, best[1]))
        self.count("tcp connections matched exactly", len(pairs))
        # By time: connects to port P against accepts on port P, by the time each was opened.
        servers: dict[int, list[tuple[int, int, _Sock]]] = {}  # (open time, id, socket)
        for s in socks:
            listens_on = s.local[1] if s.local else None
            if s.role == ACCEPT and s.open_time is not None and s.id not in used and listens_on:
                servers.setdefault(listens_on, []).append((s.open_time, s.id, s))
        for accepts in servers.values():
            accepts.sort(key=lambda x: x[:2])
        times = {port: [t for t, _, _ in accepts] for port, accepts in servers.items()}
        unused_from = dict.fromkeys(servers, 0)  # accepts before this index are all paired
        clients = sorted(
            (s.open_time, s.id, s.remote[1] or -1, s)
            for s in socks
            if s.role == CONNECT and s.open_time is not None and s.id not in used and s.remote
        )
        n = 0
        for opened, _, port, c in clients:
            accepts = servers.get(port, [])
            if not accepts:
                continue
            while unused_from[port] < len(accepts) and accepts[unused_from[port]][2].id in used:
                unused_from[port] += 1
            lo = max(bisect.bisect_left(times[port], opened - tol), unused_from[port])
            chosen = None
            looked = 0
            for accepted, _, s in accepts[lo:]:
                if accepted > opened + tol or looked > _BYTES_LOOKAHEAD:
                    break
                if s.id in used or not self._ends_compatible(c, s):
                    continue
                if _bytes_agree(c, s):
                    chosen = s
                    break
                if chosen is None:
                    chosen = s
                looked += 1
            if chosen is not None:
                used.update((c.id, chosen.id))
                pairs.append((c, chosen))
                n += 1
        self.count("tcp connections matched by time", n)
        return pairs

    def _ends_compatible(self, a: _Sock, b: _Sock) -> bool:
        return self.compatible(a.remote, b.local, b.host, a.host) and self.compatible(
            b.remote, a.local, a.host, b.host
        )

    def _directions(self, conns: list[tuple[_Sock, _Sock | None]]) -> _Directions:
        """Per socket, its connection, its end and the bases of its byte offsets; per direction,
        the names of its ends, its flow and its kind (a connection whose ends could not be
        aligned has its receives dropped)."""
        ev = self.ev
        nsock = int(ev.sock.max()) + 1 if len(ev) else 0
        ndir = 2 * len(conns)
        d = _Directions(
            np.full(nsock, -1, dtype=np.int64),
            np.zeros(nsock, dtype=np.int64),
            np.zeros(nsock, dtype=np.int64),
            np.zeros(nsock, dtype=np.int64),
            np.zeros(nsock, dtype=bool),
            np.full((ndir, 6), NONE, dtype=np.int32),
            np.zeros(ndir, dtype=np.int64),
            np.zeros(ndir, dtype=np.int8),  # _BOTH, _TO_UNTRACED, ...
        )
        code = self.strings.code
        for c, (a, b) in enumerate(conns):
            d.conn_of[a.id] = c
            d.flow[2 * c : 2 * c + 2] = self.flow(("tcp", a.id))
            if b is None:
                server = True if a.role == CONNECT else False if a.role == ACCEPT else None
                node, host = self.peer(a.remote, server, a.local)
                mine = (a.node, a.host, self.endpoint(a.local, None, a.host))
                theirs = (node, host, _known_endpoint(a.remote))
                d.kind[2 * c : 2 * c + 2] = (_TO_UNTRACED, _FROM_UNTRACED)
            else:
                d.conn_of[b.id] = c
                d.end_of[b.id] = 1
                mine = (a.node, a.host, self.endpoint(a.local, b.remote, a.host))
                theirs = (b.node, b.host, self.endpoint(b.local, a.remote, b.host))
                if a.open_time is None or b.open_time is None:
                    bases = _align(
                        _runs(ev, self.data_rows(a), flip=False),
                        _runs(ev, self.data_rows(b), flip=True),
                    )
                    if bases is None:
                        self.count("tcp connections not aligned")
                        d.drop_recv[[a.id, b.id]] = True
                        d.kind[2 * c : 2 * c + 2] = _UNALIGNED
                    else:
                        d.base_recv[b.id], d.base_send[b.id] = bases
            d.names[2 * c] = [code(x) for x in (*mine, *theirs)]
            d.names[2 * c + 1] = [code(x) for x in (*theirs, *mine)]
        return d

    def _tcp_messages(self, conns: list[tuple[_Sock, _Sock | None]]) -> None:
        """Fat messages of every connection at once (see the module docstring).

        Connection ``c`` has directions ``2c`` (from end a) and ``2c + 1`` (from end b or the
        untraced peer). Every send and receive gets its direction and its byte range in that
        direction's stream; message boundaries are the starts of runs on either end; a
        message's send time is that of the write holding its first byte, its receive time that
        of the read completing its last byte.
        """
        ev = self.ev
        d = self._directions(conns)
        conn_of, end_of, drop_recv = d.conn_of, d.end_of, d.drop_recv
        base_send, base_recv, ndir = d.base_send, d.base_recv, 2 * len(conns)
        dir_names, dir_flow, dir_kind = d.names, d.flow, d.kind
        rows = self.order[self.is_data]
        rows = rows[conn_of[ev.sock[rows]] >= 0]
        sock, kind, nbytes = ev.sock[rows], ev.kind[rows], ev.bytes[rows]
        # A run starts where the socket's previous call went the other way (or at its first).
        new_run = run_heads(sock, kind)
        keep = ~((kind == RECV) & drop_recv[sock])
        self.count("skipped: receive on an unaligned connection", int(np.count_nonzero(~keep)))
        rows, sock, kind, nbytes, new_run = (x[keep] for x in (rows, sock, kind, nbytes, new_run))
        self.count("events_used", len(rows))
        if not len(rows):
            return
        sending = kind == SEND
        end = end_of[sock]
        direction = 2 * conn_of[sock] + np.where(sending, end, 1 - end)
        stop = _stream_offsets(sock, kind, nbytes)
        stop += np.where(sending, base_send[sock], base_recv[sock])
        start = stop - nbytes
        # One int64 key orders (direction, offset): each direction gets its own range of keys.
        lo = np.full(ndir, np.iinfo(np.int64).max)
        hi = np.full(ndir, np.iinfo(np.int64).min)
        np.minimum.at(lo, direction, start)
        np.maximum.at(hi, direction, stop)
        span = np.where(lo <= hi, hi - lo + 1, 0)
        top = np.cumsum(span)
        shift = top - span - np.where(lo <= hi, lo, 0)  # key = shift[direction] + offset
        bounds = distinct(shift[direction[new_run]] + start[new_run])
        seg_dir = np.searchsorted(top, bounds, side="right")
        seg_start = bounds - shift[seg_dir]
        same_next = np.r_[seg_dir[1:] == seg_dir[:-1], False]
        seg_stop = np.where(same_next, np.r_[seg_start[1:], 0], hi[seg_dir])
        keys = shift[direction] + stop
        at = _Calls(keys, direction, seg_dir, ev.time[rows], ev.record[rows])
        send, send_rec = at.find(np.flatnonzero(sending), bounds, "right", start, seg_start, True)
        stop_keys = shift[seg_dir] + seg_stop
        recv, recv_rec = at.find(
            np.flatnonzero(~sending), stop_keys, "left", start, seg_stop, False
        )
        kinds = dir_kind[seg_dir]
        self.count("tcp messages", len(bounds))
        both = kinds == _BOTH
        self.count("unmatched sends", int(np.count_nonzero(both & (recv == MISSING))))
        self.count("unmatched receives", int(np.count_nonzero(both & (send == MISSING))))
        for k, reason in _ONE_SIDED.items():
            self.count(reason, int(np.count_nonzero(kinds == k)))
        names = dir_names[seg_dir]
        for i, column in enumerate(_NAME_COLUMNS):
            self._cols[column].append(names[:, i])
        for column, values in (
            ("send", send),
            ("recv", recv),
            ("size", seg_stop - seg_start),
            ("flow", dir_flow[seg_dir]),
            ("record", np.where(send_rec >= 0, send_rec, recv_rec)),
        ):
            self._cols[column].append(values.astype(np.int64))

    def _emit(self, sender, receiver, send: int, recv: int, size: int, flow: int, record: int):
        """Append one message between (node, host, endpoint) ``sender`` and ``receiver``."""
        code = self.strings.code
        row = [code(v) for v in (*sender, *receiver)] + [send, recv, size, flow, record]
        for key, value in zip(self._rows, row, strict=True):
            self._rows[key].append(value)

    # --- UDP -----------------------------------------------------------------------------------

    def _udp(self, socks: list[_Sock]) -> None:  # noqa: C901, PLR0912, PLR0915
        if not socks:
            return
        ev = self.ev
        by_id = {s.id: s for s in socks}
        rows = np.concatenate([self.data_rows(s) for s in socks])
        sends = rows[ev.kind[rows] == SEND]
        recvs = rows[ev.kind[rows] == RECV]
        groups: dict[tuple[int, int], list[int]] = {}
        for row in sends[np.lexsort((ev.record[sends], ev.time[sends]))].tolist():
            groups.setdefault((int(ev.bytes[row]), int(ev.checksum[row])), []).append(row)
        group_times = {k: [int(ev.time[r]) for r in v] for k, v in groups.items()}
        received_by: dict[int, set[int]] = {}
        matched: list[tuple[int, int]] = []
        unmatched: list[int] = []
        learned: dict[int, Addr] = {}  # sender socket -> its address as receivers saw it
        tol = self.p.datagram_tolerance_ns
        duplicates = 0
        for r in recvs[np.lexsort((ev.record[recvs], ev.time[recvs]))].tolist():
            rs = by_id[int(ev.sock[r])]
            key = (int(ev.bytes[r]), int(ev.checksum[r]))
            cands = groups.get(key, [])
            times = group_times.get(key, [])
            t = int(ev.time[r])
            lo = bisect.bisect_left(times, t - tol)
            hi = bisect.bisect_right(times, t + tol)
            best = dup = None
            src_seen = self.addr(int(ev.remote[r]))
            for s in cands[lo:hi]:
                ss = by_id[int(ev.sock[s])]
                if ss is rs:
                    continue
                dst_seen = self.addr(int(ev.remote[s]))
                if not (
                    self.compatible(dst_seen, rs.local, rs.host, ss.host)
                    and self.compatible(src_seen, ss.local, ss.host, rs.host)
                ):
                    continue
                if rs.id in received_by.get(s, ()):
                    dup = s
                    continue
                best = s
                break
            if best is not None:
                received_by.setdefault(best, set()).add(rs.id)
                matched.append((best, r))
                ss = by_id[int(ev.sock[best])]
                if src_seen is not None and (ss.local is None or ss.local[1] is None):
                    learned.setdefault(ss.id, src_seen)
            elif dup is not None:
                duplicates += 1
            else:
                unmatched.append(r)
        self.count("events_used", len(rows) - duplicates)
        self.count("udp duplicated", duplicates)
        self.count("skipped: duplicate datagram receipt", duplicates)
        self.count("udp reordered", self._reordered(matched))
        for s, r in matched:
            self._datagram(s, r, by_id, learned)
        by_port = self._by_port(socks, learned)
        for r in unmatched:
            src = self.addr(int(ev.remote[r]))
            sender = self._traced_at(src, by_id[int(ev.sock[r])], int(ev.time[r]), by_port)
            if sender is not None:
                self.count("unmatched receives")
                self._datagram(None, r, by_id, learned, peer=sender)
            else:
                self.count("receives from untraced peers")
                self._datagram(None, r, by_id, learned)
        for s in sends.tolist():
            if s in received_by:
                continue
            dst = self.addr(int(ev.remote[s]))
            target = self._traced_at(dst, by_id[int(ev.sock[s])], int(ev.time[s]), by_port)
            if target is not None:
                self.count("udp lost")
                self.count("unmatched sends")
                self._datagram(s, None, by_id, learned, peer=target)
            else:
                self.count("sends to untraced peers")
                self._datagram(s, None, by_id, learned)

    def _reordered(self, matched: list[tuple[int, int]]) -> int:
        ev = self.ev
        by_pair: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
        for s, r in matched:
            key = (int(ev.sock[s]), int(ev.sock[r]))
            item = (int(ev.time[r]), int(ev.record[r]), int(ev.time[s]), int(ev.record[s]))
            by_pair.setdefault(key, []).append(item)
        n = 0
        for items in by_pair.values():
            items.sort()
            latest = None
            for _, _, ts, rec in items:
                if latest is not None and (ts, rec) < latest:
                    n += 1
                else:
                    latest = (ts, rec)
        return n

    def _by_port(self, socks: list[_Sock], learned: dict[int, Addr]) -> dict[int, list[_Sock]]:
        """Traced datagram sockets by local port (as known or as their peers saw it)."""
        out: dict[int, list[_Sock]] = {}
        for s in socks:
            local = s.local if s.local is not None and s.local[1] else learned.get(s.id)
            if local is not None and local[1]:
                out.setdefault(local[1], []).append(s)
        return out

    def _traced_at(
        self, addr: Addr | None, other: _Sock, t: int, by_port: dict[int, list[_Sock]]
    ) -> _Sock | None:
        """A traced datagram socket (not ``other``) at ``addr`` while it was traced, at ``t``
        give or take the tolerance: the intended end of a datagram the other end missed."""
        if addr is None or addr[1] is None:
            return None
        tol = self.p.datagram_tolerance_ns
        for s in by_port.get(addr[1], []):
            if s is other or not (s.first - tol <= t <= s.last + tol):
                continue
            if self.compatible(addr, s.local, s.host, other.host):
                return s
        return None

    def _datagram(
        self,
        s: int | None,
        r: int | None,
        by_id: dict[int, _Sock],
        learned: dict[int, Addr],
        peer: _Sock | None = None,
    ) -> None:
        """Emit one datagram from send row ``s`` to receive row ``r``; when one is None, the
        traced socket ``peer`` is the end that missed it (else an untraced address)."""
        ev = self.ev
        ss = by_id[int(ev.sock[s])] if s is not None else peer
        rs = by_id[int(ev.sock[r])] if r is not None else peer
        dst_seen = self.addr(int(ev.remote[s])) if s is not None else None
        src_seen = self.addr(int(ev.remote[r])) if r is not None else None
        if ss is not None:
            own = ss.local if ss.local is not None and ss.local[1] else learned.get(ss.id)
            sender = (ss.node, ss.host, self.endpoint(own, src_seen, ss.host))
            skey: object = ("sock", ss.id)
        else:
            sender = self._untraced(src_seen, rs.local if rs else None)
            skey = ("addr", sender[2] or sender[0])
        if rs is not None:
            receiver = (rs.node, rs.host, self.endpoint(rs.local, dst_seen, rs.host))
            rkey: object = ("sock", rs.id)
        else:
            receiver = self._untraced(dst_seen, ss.local if ss else None)
            rkey = ("addr", receiver[2] or receiver[0])
        if "unknown" in (sender[0], receiver[0]):
            self.count("datagrams with an unknown peer address")
        row = s if s is not None else r
        self.count("udp messages")
        self._emit(
            sender,
            receiver,
            int(ev.time[s]) if s is not None else MISSING,
            int(ev.time[r]) if r is not None else MISSING,
            int(ev.bytes[row]),
            self.flow(("udp", frozenset((skey, rkey)))),
            int(ev.record[row]),
        )

    def _untraced(self, addr: Addr | None, own: Addr | None) -> tuple[str, str, str | None]:
        node, host = self.peer(addr, None, own)
        return node, host, _known_endpoint(addr)


# --- helpers ---------------------------------------------------------------------------------


def _known_endpoint(addr: Addr | None) -> str | None:
    """``ip:port`` of an address whose IP and port are both known, else None."""
    if addr is None:
        return None
    ip, port = addr
    return format_addr(ip, port) if ip and port else None


def _loopback(ip: str) -> bool:
    return ip.startswith("127.") or ip == "::1"


def _open_or_first(s: _Sock) -> int:
    return s.open_time if s.open_time is not None else s.first


def _client_first(a: _Sock, b: _Sock) -> tuple[_Sock, _Sock]:
    return (b, a) if b.role == CONNECT or a.role == ACCEPT else (a, b)


def _bytes_agree(c: _Sock, s: _Sock) -> bool:
    """Whether two closed ends moved the same bytes each way (unknown unless both closed)."""
    return c.closed and s.closed and c.sent == s.received and s.sent == c.received


def _runs(ev: SocketEvents, rows: np.ndarray, flip: bool) -> list:
    """(direction, size, start offset) of the first runs of one end, in its own order."""
    kinds = ev.kind[rows]
    runs: list[tuple[int, int, int]] = []
    offsets = [0, 0]
    for k, nbytes in zip(kinds.tolist(), ev.bytes[rows].tolist(), strict=True):
        d = (0 if k == SEND else 1) ^ int(flip)
        if runs and runs[-1][0] == d:
            runs[-1] = (d, runs[-1][1] + nbytes, runs[-1][2])
        else:
            if len(runs) == _ALIGN_RUNS:
                break
            runs.append((d, nbytes, offsets[d]))
        offsets[d] += nbytes
    return runs


_ALIGN_RUNS = 64
"""Runs compared when aligning two ends traced from mid-connection."""


def _align(ra: list, rb: list) -> tuple[int, int] | None:
    """Byte-offset bases (receive, send) of end b's streams that line them up with end a's,
    from the runs (direction, size, offset) both ends saw (``rb`` in a's directions: 0 is a to
    b); None when no alignment is found."""
    best = None
    for shift in range(-(len(rb) - 1), len(ra)):
        score = sum(
            1
            for i in range(max(0, shift), min(len(ra), len(rb) + shift))
            if ra[i][:2] == rb[i - shift][:2]
        )
        if score and (best is None or (score, -abs(shift)) > (best[0], -abs(best[1]))):
            best = (score, shift)
    if best is None:
        return None
    shift = best[1]
    bases: dict[int, int] = {}
    for i in range(max(0, shift), min(len(ra), len(rb) + shift)):
        x, y = ra[i], rb[i - shift]
        if x[:2] == y[:2] and x[0] not in bases:
            bases[x[0]] = x[2] - y[2]
    for d in (0, 1):
        if d not in bases and any(r[0] == d for r in ra) and any(r[0] == d for r in rb):
            return None
    return bases.get(0, 0), bases.get(1, 0)


def _stream_offsets(sock: np.ndarray, kind: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Each call's end offset in its socket's send or receive stream (calls in time order)."""
    order = np.lexsort((np.arange(len(sock)), kind, sock))
    s, k = sock[order], kind[order]
    cum = np.cumsum(nbytes[order])
    first = run_heads(s, k)
    before = (cum - nbytes[order])[first]
    out = np.empty_like(cum)
    out[order] = cum - before[np.cumsum(first) - 1]
    return out


class _Directions(NamedTuple):
    """The two directions of every TCP connection (:meth:`_Reconciler._directions`)."""

    conn_of: np.ndarray
    end_of: np.ndarray
    base_send: np.ndarray
    base_recv: np.ndarray
    drop_recv: np.ndarray
    names: np.ndarray
    flow: np.ndarray
    kind: np.ndarray


@dataclass
class _Calls:
    """Sends or receives of all connections, searchable by (direction, end offset) key."""

    keys: np.ndarray
    direction: np.ndarray
    seg_dir: np.ndarray
    times: np.ndarray
    records: np.ndarray

    def find(self, calls, targets, side, start, seg_edge, first_byte: bool):
        """Per segment, (time, record) of the call among ``calls`` holding the segment's first
        byte (``first_byte``) or completing its last byte; MISSING/-1 when that end has no such
        call (not traced then, or never sent or received)."""
        n = len(targets)
        if not len(calls):
            return np.full(n, MISSING, dtype=np.int64), np.full(n, -1, dtype=np.int64)
        by_key = calls[np.argsort(self.keys[calls], kind="stable")]
        j = np.searchsorted(self.keys[by_key], targets, side=side)
        j = by_key[np.minimum(j, len(by_key) - 1)]
        ok = self.direction[j] == self.seg_dir
        ok &= start[j] <= seg_edge if first_byte else start[j] < seg_edge
        return np.where(ok, self.times[j], MISSING), np.where(ok, self.records[j], -1)


_BYTES_LOOKAHEAD = 16
"""Accepts looked at past the first compatible one for one whose byte counts agree."""

_BOTH, _TO_UNTRACED, _FROM_UNTRACED, _UNALIGNED = range(4)
_ONE_SIDED = {
    _TO_UNTRACED: "sends to untraced peers",
    _FROM_UNTRACED: "receives from untraced peers",
    _UNALIGNED: "sends on unaligned connections",
}


def _time_order(table: MessageTable) -> np.ndarray:
    first = np.where(table.send != MISSING, table.send, table.recv)
    return np.lexsort((table.record, table.flow, first))

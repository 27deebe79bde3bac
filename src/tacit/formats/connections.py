"""Connections and their client-to-server direction: for Pirate (arXiv 2505.14358, §3), for the
request truth and for spans from packets.

Pirate estimates response latency per connection from the client's packets only, so it must
know, for every packet, its connection (the 5-tuple, either way round) and whether it travels
from the client to the server. The direction of a connection is decided, in this order:

1. ``server`` given (``"ADDR:PORT"``, ``"ADDR"``, ``"[V6]:PORT"`` or just ``"PORT"``): the
   endpoint that matches it is the server. Connections that do not involve it are set aside
   (decision ``not_server``) and none of their packets is used.
2. ``handshake``: the sender of a SYN without ACK is the client (or the receiver of a
   SYN+ACK).
3. ``port``: without a handshake, the endpoint on a known service port (:data:`SERVICE_PORTS`)
   is the server; else the endpoint with the lower port (well-known and registered ports lie
   below the ephemeral range, RFC 6335 §6 — but an old or odd stack may pick an ephemeral port
   below a service's, e.g. 1234 against Redis's 6379).
4. ``first_packet``: equal ports — the sender of the connection's first packet is the client.

A 5-tuple is one connection for as long as it is seen (a reused 5-tuple continues the same
connection). :class:`ConnectionRegistry` keeps connections across batches for streaming;
connection indices are given in order of first appearance, so that a capture fed in
time-ordered pieces gets the same indices as when fed whole. A direction is decided from the
batch in which the connection first appears.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

from tacit.compiled import grown
from tacit.errors import ConfigError
from tacit.hashing import hash64, ids64, mix64
from tacit.model.packets import ACK, SYN, TCP, UDP, format_endpoint, parse_endpoint
from tacit.runs import contained

DECISIONS = ("server", "handshake", "port", "first_packet", "not_server")
"""How a connection's direction was decided (index = code in :attr:`ConnectionTable.decided`)."""
BY_SERVER, BY_HANDSHAKE, BY_PORT, BY_FIRST_PACKET, NOT_SERVER = range(len(DECISIONS))

SERVICE_PORTS = frozenset({53, 80, 443, 3306, 5432, 6379, 8080, 8443, 11211})
"""Ports that name the server end of a connection whatever the other port (DNS, HTTP(S),
MySQL, PostgreSQL, Redis, memcached)."""

FORGET_NS = 600 * 10**9
"""A connection of a reader that runs without end, quiet this long and with nothing pending, is
forgotten (:meth:`ConnectionRegistry.forget`): a live source then holds the connections in
use, not every one it saw (a few dozen bytes each: gigabytes a day at a thousand new
connections a second)."""
MIN_COMPACT = 65_536
"""Connections registered before :meth:`ConnectionRegistry.forget` looks at them."""

_SEED = np.uint64(0x5049524154450001)
_EMPTY = -1


@dataclass
class ConnectionTable:
    """Every connection seen, one row each (row index = connection index).

    ``proto`` (TCP or UDP), the client's and the server's address (128-bit, IPv4-mapped, as in
    :class:`~tacit.model.packets.PacketTable`) and port, and ``decided``: how the direction was
    decided (a code into :data:`DECISIONS`).
    """

    proto: np.ndarray
    client_hi: np.ndarray
    client_lo: np.ndarray
    client_port: np.ndarray
    server_hi: np.ndarray
    server_lo: np.ndarray
    server_port: np.ndarray
    decided: np.ndarray

    def __len__(self) -> int:
        return len(self.proto)

    def client(self, i: int) -> str:
        """The client's ``address:port`` of connection ``i``."""
        return format_endpoint(self.client_hi[i], self.client_lo[i], int(self.client_port[i]))

    def server(self, i: int) -> str:
        """The server's ``address:port`` of connection ``i``."""
        return format_endpoint(self.server_hi[i], self.server_lo[i], int(self.server_port[i]))

    def decided_counts(self) -> dict[str, int]:
        """Connections per way of deciding their direction."""
        counts = np.bincount(self.decided, minlength=len(DECISIONS))
        return {name: int(c) for name, c in zip(DECISIONS, counts, strict=True)}

    def find_clients(self, hi: np.ndarray, lo: np.ndarray, port: np.ndarray) -> np.ndarray:
        """The connection whose client is ``(hi, lo, port)``, per element; -1 where none is (the
        first such connection when a client endpoint has several, e.g. over TCP and UDP)."""
        own = _endpoint_hash(self.client_hi, self.client_lo, self.client_port)
        order = np.argsort(own, kind="stable")
        asked = _endpoint_hash(np.asarray(hi), np.asarray(lo), np.asarray(port))
        at = np.minimum(np.searchsorted(own[order], asked), max(len(own) - 1, 0))
        if not len(own):
            return np.full(len(asked), -1, dtype=np.int64)
        found = order[at]
        ok = (
            (own[found] == asked)
            & (self.client_hi[found] == np.asarray(hi, dtype=np.uint64))
            & (self.client_lo[found] == np.asarray(lo, dtype=np.uint64))
            & (self.client_port[found] == np.asarray(port))
        )
        return np.where(ok, found, -1).astype(np.int64)

    def as_rows(self) -> list[dict]:
        """One JSON-ready dict per connection."""
        return [
            {
                "connection": i,
                "proto": int(self.proto[i]),
                "client": self.client(i),
                "server": self.server(i),
                "decided": DECISIONS[int(self.decided[i])],
            }
            for i in range(len(self))
        ]


@dataclass
class Connections:
    """The connections of one batch of packets.

    ``row_connection``: per packet, its connection (an index into ``table``), -1 for packets
    that are neither TCP nor UDP. ``to_server``: per packet, sent by the client (False for
    packets without a connection). ``table``: every connection known so far.
    """

    row_connection: np.ndarray
    to_server: np.ndarray
    table: ConnectionTable


def parse_server(server: str | None) -> tuple[int | None, int | None, int | None]:
    """``(hi, lo, port)`` of a server given as ``"ADDR:PORT"``, ``"ADDR"`` or ``"PORT"`` (None
    for what is not given)."""
    if server is None:
        return None, None, None
    text = server.strip()
    hi: int | None
    lo: int | None
    port: int | None
    if text.isdigit():
        hi, lo, port = None, None, int(text)
    else:
        hi, lo, port = parse_endpoint(text)
    if port is not None and not 0 < port <= 0xFFFF:  # port 0 is no TCP connection's
        raise ConfigError(f"not a port number: {text!r}")
    return hi, lo, port


class ConnectionRegistry:
    """Connections across batches of packets: see the module docstring."""

    def __init__(self, server: str | None = None, min_compact: int = MIN_COMPACT) -> None:
        self.server = parse_server(server)
        self.min_compact = min_compact
        self.count = 0
        cap = 1024
        self._keys = np.zeros((cap, 4), dtype=np.uint64)  # a_hi, a_lo, b_hi, b_lo
        self._ports = np.zeros((cap, 2), dtype=np.uint16)  # a_port, b_port
        self._proto = np.zeros(cap, dtype=np.uint8)
        self._syn_side = np.full(cap, -1, dtype=np.int8)
        self._first_side = np.zeros(cap, dtype=np.int8)
        self._client_side = np.zeros(cap, dtype=np.int8)
        self._decided = np.zeros(cap, dtype=np.uint8)
        self._slots = np.full(2 * cap, _EMPTY, dtype=np.int64)

    def assign(self, packets) -> Connections:
        """Connections of ``packets`` (a :class:`~tacit.model.packets.PacketTable`), registering
        the new ones and deciding their direction."""
        n = len(packets)
        conn = np.full(n, -1, dtype=np.int64)
        side = np.zeros(n, dtype=np.int8)
        old = self.count
        row = 0
        while row < n:
            self._reserve(min(n - row, 1 << 20))
            row, self.count = _assign(
                row,
                packets.proto,
                packets.src_hi,
                packets.src_lo,
                packets.dst_hi,
                packets.dst_lo,
                packets.sport,
                packets.dport,
                packets.tcp_flags,
                self._slots,
                self._keys,
                self._ports,
                self._proto,
                self._syn_side,
                self._first_side,
                self.count,
                conn,
                side,
            )
        self._decide(old, self.count)
        has = conn >= 0
        to_server = np.zeros(n, dtype=bool)
        to_server[has] = side[has] == self._client_side[conn[has]]
        return Connections(conn, to_server, self.table())

    def table(self) -> ConnectionTable:
        """Every connection registered so far."""
        k = self.count
        client_b = self._client_side[:k] == 1
        a, b = self._keys[:k], self._ports[:k]
        pick = np.where(client_b[:, None], 1, 0)
        return ConnectionTable(
            proto=self._proto[:k].copy(),
            client_hi=np.where(client_b, a[:, 2], a[:, 0]),
            client_lo=np.where(client_b, a[:, 3], a[:, 1]),
            client_port=np.take_along_axis(b, pick, axis=1)[:, 0].copy(),
            server_hi=np.where(client_b, a[:, 0], a[:, 2]),
            server_lo=np.where(client_b, a[:, 1], a[:, 3]),
            server_port=np.take_along_axis(b, 1 - pick, axis=1)[:, 0].copy(),
            decided=self._decided[:k].copy(),
        )

    @property
    def bytes_per_connection(self) -> int:
        """Bytes kept per connection: the key (addresses, ports, protocol) and the direction
        bookkeeping (SYN sender, first sender, client side, decision)."""
        arrays = (self._proto, self._syn_side, self._first_side, self._client_side, self._decided)
        key = self._keys.itemsize * 4 + self._ports.itemsize * 2
        return key + sum(a.itemsize for a in arrays)

    def forget(self, keep: Callable[[int], np.ndarray]) -> np.ndarray | None:
        """Forget the connections not in ``keep(count)`` (a mask over those registered), for a
        reader that runs without end, once at least ``min_compact`` are registered and the
        forgotten would be half of them (so that each compaction pays for itself); a connection
        seen again is registered anew, its direction decided again from what it then shows.
        Returns the new index of every old one (-1: forgotten; the kept keep their order), or
        None when nothing was forgotten."""
        k = self.count
        if k < self.min_compact:
            return None
        kept = np.flatnonzero(keep(k)[:k])
        if len(kept) > k // 2:
            return None
        remap = np.full(k, -1, dtype=np.int64)
        remap[kept] = np.arange(len(kept))
        for name in ("_keys", "_ports", "_proto", "_syn_side", "_first_side", "_client_side",
                     "_decided"):  # fmt: skip
            a = getattr(self, name)
            out = np.zeros_like(a)
            out[: len(kept)] = a[kept]
            setattr(self, name, out)
        self.count = len(kept)
        self._slots = _rehash(len(self._slots), self._keys, self._ports, self._proto, self.count)
        self.min_compact = max(self.min_compact, 2 * len(kept))
        return remap

    def excluded(self) -> np.ndarray:
        """Per connection: set aside because it does not involve the given server."""
        return self._decided[: self.count] == NOT_SERVER

    def _reserve(self, more: int) -> None:
        need = self.count + more
        cap = len(self._proto)
        if need > cap:
            cap = max(need, 2 * cap)
            self._keys = np.concatenate([self._keys, np.zeros((cap - len(self._keys), 4), "u8")])
            self._ports = np.concatenate([self._ports, np.zeros((cap - len(self._ports), 2), "u2")])
            self._proto = grown(self._proto, cap)
            for name in ("_syn_side", "_first_side", "_client_side", "_decided"):
                setattr(self, name, grown(getattr(self, name), cap))
        if 2 * need > len(self._slots):
            size = len(self._slots)
            while 2 * need > size:
                size *= 2
            self._slots = _rehash(size, self._keys, self._ports, self._proto, self.count)

    def _decide(self, lo: int, hi: int) -> None:
        if hi <= lo:
            return
        keys, ports = self._keys[lo:hi], self._ports[lo:hi]
        decided = np.full(hi - lo, BY_FIRST_PACKET, dtype=np.uint8)
        client = self._first_side[lo:hi].copy()
        by_port = ports[:, 0] != ports[:, 1]
        client[by_port] = (ports[by_port, 0] < ports[by_port, 1]).astype(np.int8)
        service = contained(ports, list(SERVICE_PORTS))
        one_service = service[:, 0] != service[:, 1]
        client[one_service] = service[one_service, 0].astype(np.int8)  # A serves: B is client
        decided[by_port | one_service] = BY_PORT
        syn = self._syn_side[lo:hi] >= 0
        client[syn] = self._syn_side[lo:hi][syn]
        decided[syn] = BY_HANDSHAKE
        s_hi, s_lo, s_port = self.server
        if s_port is not None or s_hi is not None:
            match = []
            for end in (0, 1):
                m = np.ones(hi - lo, dtype=bool)
                if s_hi is not None and s_lo is not None:
                    m &= (keys[:, 2 * end] == np.uint64(s_hi)) & (
                        keys[:, 2 * end + 1] == np.uint64(s_lo)
                    )
                if s_port is not None:
                    m &= ports[:, end] == s_port
                match.append(m)
            a_server, b_server = match
            client[b_server] = 0
            client[a_server] = 1
            decided[a_server | b_server] = BY_SERVER
            decided[~(a_server | b_server)] = NOT_SERVER
        self._client_side[lo:hi] = client
        self._decided[lo:hi] = decided


def _endpoint_hash(hi: np.ndarray, lo: np.ndarray, port: np.ndarray) -> np.ndarray:
    h = hash64(ids64(hi), 1) ^ hash64(ids64(lo), 2)
    return hash64(h ^ ids64(port), 3)


@njit(cache=True, inline="always")
def _key_hash(proto, a_hi, a_lo, a_port, b_hi, b_lo, b_port):  # pragma: no cover - compiled
    h = mix64(np.uint64(proto), _SEED)
    h = mix64(h ^ a_hi, _SEED)
    h = mix64(h ^ a_lo, _SEED)
    h = mix64(h ^ np.uint64(a_port), _SEED)
    h = mix64(h ^ b_hi, _SEED)
    h = mix64(h ^ b_lo, _SEED)
    return mix64(h ^ np.uint64(b_port), _SEED)


@njit(cache=True)
def _rehash(size, keys, ports, proto, count):  # pragma: no cover - compiled
    slots = np.full(size, _EMPTY, dtype=np.int64)
    mask = np.uint64(size - 1)
    for c in range(count):
        h = _key_hash(
            proto[c], keys[c, 0], keys[c, 1], ports[c, 0], keys[c, 2], keys[c, 3], ports[c, 1]
        )
        s = np.int64(h & mask)
        while slots[s] != _EMPTY:
            s = (s + 1) & (size - 1)
        slots[s] = c
    return slots


@njit(cache=True)
def _assign(
    row,
    proto,
    src_hi,
    src_lo,
    dst_hi,
    dst_lo,
    sport,
    dport,
    flags,
    slots,
    keys,
    ports,
    cproto,
    syn_side,
    first_side,
    count,
    conn,
    side,
):  # pragma: no cover - compiled
    """Connection and side (0: the packet's source is endpoint A, the lesser) of every row from
    ``row`` on; stops early when the connection arrays are full. Returns (next row, count)."""
    size = len(slots)
    cap = len(cproto)
    for i in range(row, len(proto)):
        p = proto[i]
        if p != TCP and p != UDP:
            continue
        s_hi, s_lo, s_p = src_hi[i], src_lo[i], sport[i]
        d_hi, d_lo, d_p = dst_hi[i], dst_lo[i], dport[i]
        swap = (s_hi > d_hi) or (s_hi == d_hi and (s_lo > d_lo or (s_lo == d_lo and s_p > d_p)))
        if swap:
            a_hi, a_lo, a_p, b_hi, b_lo, b_p = d_hi, d_lo, d_p, s_hi, s_lo, s_p
        else:
            a_hi, a_lo, a_p, b_hi, b_lo, b_p = s_hi, s_lo, s_p, d_hi, d_lo, d_p
        h = _key_hash(p, a_hi, a_lo, a_p, b_hi, b_lo, b_p)
        s = np.int64(h & np.uint64(size - 1))
        c = -1
        while slots[s] != _EMPTY:
            k = slots[s]
            if (
                cproto[k] == p
                and keys[k, 0] == a_hi
                and keys[k, 1] == a_lo
                and keys[k, 2] == b_hi
                and keys[k, 3] == b_lo
                and ports[k, 0] == a_p
                and ports[k, 1] == b_p
            ):
                c = k
                break
            s = (s + 1) & (size - 1)
        if c < 0:
            if count == cap:
                return i, count
            c = count
            count += 1
            slots[s] = c
            keys[c, 0], keys[c, 1], keys[c, 2], keys[c, 3] = a_hi, a_lo, b_hi, b_lo
            ports[c, 0], ports[c, 1] = a_p, b_p
            cproto[c] = p
            syn_side[c] = -1
            first_side[c] = 1 if swap else 0
        sd = 1 if swap else 0
        conn[i] = c
        side[i] = sd
        if p == TCP and syn_side[c] < 0 and flags[i] & SYN:
            syn_side[c] = 1 - sd if flags[i] & ACK else sd
    return len(proto), count


def connections(packets, server: str | None = None) -> Connections:
    """The connections of ``packets`` and their client-to-server direction (module docstring)."""
    return ConnectionRegistry(server).assign(packets)

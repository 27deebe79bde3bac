"""Round-trip time baselines: what passive measurement from packet headers gives in place of the
response latency.

Pirate (arXiv 2505.14358, §2 and Fig. 1, compared in Fig. 5) argues that the usual passive
techniques measure the network round trip between the capture point and one end, not the
latency the client sees, and need both directions of a connection. These are those techniques,
from a :class:`~tacit.model.packets.PacketTable` only (no payloads), each sample being the time
from a packet passing the capture point to the packet it provoked from the far end:

- ``seq_ack`` (as tcptrace does): a data segment and the first ACK from the other side that
  covers its last byte. Karn's rule (Karn & Partridge, SIGCOMM '87): a segment that repeats
  bytes sent before, or whose bytes are sent again later, gives no sample.
- ``timestamp`` (as pping does, RFC 7323 §3): the first packet of one direction carrying a
  TSval, and the first packet of the other direction echoing it in TSecr.
- ``handshake``: SYN → SYN/ACK, and SYN/ACK → the client's ACK of it (skipped when the
  provoking packet was sent more than once).

``far_end`` says which end the round trip reaches: data from the client acknowledged by the
server measures capture point → server → capture point (``SERVER``), and the reverse measures the
client side (``CLIENT``); their sum is the end-to-end RTT. All matching is vectorized: rows are
sorted by (connection, direction, time) and matched with ``searchsorted`` on keys that keep the
groups apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.formats.exchanges import Connection, tcp_connections
from tacit.model.packets import ACK, SYN, PacketTable

METHODS = ("seq_ack", "timestamp", "handshake")
SEQ_ACK, TIMESTAMP, HANDSHAKE = range(3)
SERVER, CLIENT = 0, 1
"""``far_end`` values: the round trip from the capture point to the server or to the client."""

_GROUP = np.int64(1) << np.int64(40)
"""Spacing of the per-(connection, direction) key ranges: unwrapped sequence numbers stay within
2^39 of their group's first one (streams under 512 GiB)."""


@dataclass
class RttSamples:
    """RTT samples, one row each: ``connection`` (index into ``connections``), ``time`` (capture
    time of the packet that ends the round trip, int64 ns), ``rtt`` (int64 ns), ``method``
    (index into :data:`METHODS`), ``far_end`` (:data:`SERVER` or :data:`CLIENT`)."""

    connection: np.ndarray
    time: np.ndarray
    rtt: np.ndarray
    method: np.ndarray
    far_end: np.ndarray
    connections: list[Connection]

    def __len__(self) -> int:
        return len(self.rtt)

    def select(self, method: str, far_end: int | None = None) -> np.ndarray:
        """The rows of one method (and far end)."""
        mask = self.method == METHODS.index(method)
        return np.flatnonzero(mask if far_end is None else mask & (self.far_end == far_end))

    def as_dict(self) -> dict:
        """Sample counts and median RTT (ms) per method and far end."""
        out = {}
        for m in METHODS:
            for end, name in ((SERVER, "server"), (CLIENT, "client")):
                rows = self.select(m, end)
                if len(rows):
                    median = float(np.median(self.rtt[rows])) / 1e6
                    out[f"{m}/{name}"] = {"samples": len(rows), "median_ms": round(median, 3)}
        return out


def rtt_samples(p: PacketTable, server: str | None = None) -> RttSamples:
    """Every RTT sample of every TCP connection of ``p`` by the three methods (module
    docstring). ``server`` tells client from server as in
    :func:`~tacit.formats.exchanges.tcp_connections`."""
    conns = tcp_connections(p, server)
    rows = np.concatenate([np.concatenate([c, s]) for _, c, s in conns] or [np.empty(0, int)])
    conn = np.repeat(np.arange(len(conns)), [len(c) + len(s) for _, c, s in conns])
    side = np.concatenate(
        [np.repeat([0, 1], [len(c), len(s)]) for _, c, s in conns] or [np.empty(0, int)]
    )
    # One group per (connection, direction): 2 * connection + 0 (client → server) or 1.
    group = (2 * conn + side.astype(np.int64)).astype(np.int64)
    order = np.lexsort((p.time[rows], group))
    rows, group = rows[order], group[order]
    parts = [
        _seq_ack(p, rows, group),
        _timestamps(p, rows, group),
        _handshake(p, rows, group),
    ]
    cols = [np.concatenate([part[i] for part in parts]) for i in range(3)]
    method = np.concatenate([np.full(len(part[0]), m, np.uint8) for m, part in enumerate(parts)])
    g, t, rtt = cols
    # A sample ends with a packet from the far end: group 2c + 1 (server sent it) → SERVER.
    far = np.where(g % 2 == 1, SERVER, CLIENT).astype(np.uint8)
    sort = np.lexsort((t, g // 2))
    return RttSamples(
        (g // 2)[sort].astype(np.int32),
        t[sort],
        rtt[sort],
        method[sort],
        far[sort],
        [c for c, _, _ in conns],
    )


def _starts(group: np.ndarray) -> np.ndarray:
    """Whether each row starts its group (rows sorted by group)."""
    return np.concatenate([[True], group[1:] != group[:-1]]) if len(group) else group.astype(bool)


def _unwrap(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """32-bit sequence numbers as int64, continuing across wraparound within each group (every
    step between consecutive rows taken to be within ±2^31, RFC 9293 §3.4)."""
    v = values.astype(np.int64)
    step = np.zeros(len(v), np.int64)
    step[1:] = (np.diff(v) + 2**31) % 2**32 - 2**31
    start = _starts(group)
    step[start] = 0
    total = np.cumsum(step)
    first = np.flatnonzero(start)
    base = np.repeat(v[first] - total[first], np.diff(np.append(first, len(v))))
    return base + total


def _group_refs(values: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, ``values`` at its first row (0 for groups without rows)."""
    ref = np.zeros(n_groups, np.int64)
    first = np.flatnonzero(_starts(group))
    ref[group[first]] = values[first]
    return ref


def _seq_ack(p: PacketTable, rows: np.ndarray, group: np.ndarray):
    """Data segment → first ACK covering its last byte (tcptrace), Karn's rule applied."""
    n_groups = int(group.max()) + 2 if len(group) else 2
    seq = _unwrap(p.seq[rows], group)
    ref = _group_refs(seq, group, n_groups)  # each group's byte scale starts here
    # Segments: [start, end) relative to their group's first sequence number, kept apart by
    # group (and lifted by 2^38 so that bytes a little before the reference stay in range).
    length = np.maximum(p.payload_len[rows].astype(np.int64), 0)
    data = np.flatnonzero(length > 0)
    lift = group * _GROUP + (_GROUP >> 2)
    start = (seq - ref[group] + lift)[data]
    end = start + length[data]
    # Karn: repeats bytes already sent, or has its bytes sent again later.
    low, high = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    before = np.maximum.accumulate(np.concatenate([[low], end[:-1]]))
    later = np.minimum.accumulate(np.append(start[1:], high)[::-1])[::-1]
    clean = (start >= before) & (end <= later)
    # ACKs: unwrapped among the ACK rows of each group, moved by a multiple of 2^32 next to the
    # peer's first sequence number, then as running maxima on the peer's scale.
    acks = np.flatnonzero((p.tcp_flags[rows] & ACK) != 0)
    a_group = group[acks]
    ack = _unwrap(p.ack[rows[acks]], a_group)
    peer_ref = ref[a_group ^ 1]
    first = _group_refs(ack, a_group, n_groups)[a_group]
    ack += (peer_ref - first + 2**31) // 2**32 * 2**32
    key = np.maximum.accumulate(ack - peer_ref + a_group * _GROUP + (_GROUP >> 2))
    # The first ACK of the peer group whose running maximum reaches the segment's end.
    peer = group[data] ^ 1
    want = end - lift[data] + peer * _GROUP + (_GROUP >> 2)
    hit = np.searchsorted(key, want, "left")
    found = hit < len(acks)
    hit = np.minimum(hit, max(len(acks) - 1, 0))
    ok = clean & found
    if len(acks):
        ok &= a_group[hit] == peer
    else:
        return _empty()
    t0, t1 = p.time[rows[data]], p.time[rows[acks[hit]]]
    ok &= t1 >= t0
    return peer[ok], t1[ok], (t1 - t0)[ok]


def _timestamps(p: PacketTable, rows: np.ndarray, group: np.ndarray):
    """First packet carrying a TSval → first packet of the other direction echoing it (pping)."""
    has = p.has_ts[rows]
    flags = p.tcp_flags[rows]
    val = np.flatnonzero(has)
    echo = np.flatnonzero(has & ((flags & ACK) != 0) & (p.ts_ecr[rows] != 0))
    # np.unique's index is each key's first row: the rows are in time order within a group.
    v_key, v_first = np.unique(group[val] << 32 | p.ts_val[rows[val]].astype(np.int64), True)
    e_key, e_first = np.unique(
        (group[echo] ^ 1) << 32 | p.ts_ecr[rows[echo]].astype(np.int64), True
    )
    _, iv, ie = np.intersect1d(v_key, e_key, assume_unique=True, return_indices=True)
    sent, back = rows[val[v_first[iv]]], rows[echo[e_first[ie]]]
    t0, t1 = p.time[sent], p.time[back]
    ok = t1 >= t0
    return group[echo[e_first[ie]]][ok], t1[ok], (t1 - t0)[ok]


def _handshake(p: PacketTable, rows: np.ndarray, group: np.ndarray):
    """SYN → SYN/ACK (server side) and SYN/ACK → the ACK of it (client side)."""
    flags = p.tcp_flags[rows] & (SYN | ACK)
    conn = group // 2
    client = group % 2 == 0
    syn = np.flatnonzero((flags == SYN) & client)
    synack = np.flatnonzero((flags == SYN | ACK) & ~client)
    s_conn, s_first, s_count = np.unique(conn[syn], return_index=True, return_counts=True)
    a_conn, a_first, a_count = np.unique(conn[synack], return_index=True, return_counts=True)
    both, i_s, i_a = np.intersect1d(s_conn, a_conn, assume_unique=True, return_indices=True)
    t_syn = p.time[rows[syn[s_first[i_s]]]]
    r_synack = rows[synack[a_first[i_a]]]
    t_synack = p.time[r_synack]
    ok = (s_count[i_s] == 1) & (t_synack >= t_syn)  # Karn: a repeated SYN gives no sample
    out_g = [2 * both[ok] + 1]
    out_t = [t_synack[ok]]
    out_rtt = [(t_synack - t_syn)[ok]]
    # The client's ACK of the SYN/ACK: acknowledges its sequence number + 1.
    expect = np.full(int(conn.max()) + 1 if len(conn) else 0, -1, np.int64)
    expect[both] = (p.seq[r_synack].astype(np.int64) + 1) % 2**32
    acks = np.flatnonzero((flags == ACK) & client)
    acks = acks[p.ack[rows[acks]].astype(np.int64) == expect[conn[acks]]]
    c_conn, c_first = np.unique(conn[acks], return_index=True)
    both2, i_b, i_c = np.intersect1d(both, c_conn, assume_unique=True, return_indices=True)
    t_a = t_synack[i_b]
    t_c = p.time[rows[acks[c_first[i_c]]]]
    ok = (a_count[i_a][i_b] == 1) & (t_c >= t_a)
    out_g.append(2 * both2[ok])
    out_t.append(t_c[ok])
    out_rtt.append((t_c - t_a)[ok])
    return tuple(np.concatenate(x).astype(np.int64) for x in (out_g, out_t, out_rtt))


def _empty():
    return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)

"""Inter-packet gaps of the client-to-server direction, with the two heuristics of Pirate
(arXiv 2505.14358, §3.4).

Every packet is put in exactly one bucket (:data:`BUCKETS`); only ``used`` packets take part in
the gaps. Of the others, pure acknowledgements are *coalesced* (§3.4, first heuristic): their
timing follows the server's data, not the client's application, so they neither end nor start
a gap. TCP packets that carry no new data (retransmissions) are left out too; when one comes
after a pause longer than the gap threshold δ, the next gap of its connection is dropped, since
it spans a retransmission timeout rather than a response. A packet that fills data the capture
skipped and comes within δ is used: an original the network reordered, or the client's fast
retransmission of a packet lost before the capture (after the server's SACKs, within a round
trip), and either way no timeout lies in its gaps. Later, it is a retransmission as above.

A gap is a *candidate* response gap only when the packet before it was not a full-size segment
(§3.4, second heuristic): a full-size (MTU) segment is followed by more of the same burst.
Algorithm 2 as published takes every gap and marks the candidates (only they may make the
inter-batch-gap mode); Algorithm 1 and the centre-tracking histogram take candidates only.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tacit.formats.connections import Connections
from tacit.model.packets import FIN, NO_TIME, RST, SYN, TCP, UDP
from tacit.response_latency.params import PirateParams

BUCKETS = (
    "used",
    "other_direction",
    "coalesced_ack",
    "control",
    "retransmission",
    "out_of_order",
    "not_tcp_udp",
    "not_server",
    "no_timestamp",
    "unknown_length",
)
"""What became of a packet: ``used`` in the gaps; sent by the server (``other_direction``: never
used, even when a capture has both directions); a pure acknowledgement (``coalesced_ack``); a
SYN, FIN or RST without payload (``control``); TCP data with nothing new (``retransmission``);
earlier than the previous packet of its connection, which only happens across batches fed out
of order (``out_of_order``); neither TCP nor UDP; of a connection without the given server;
without a capture time; with a transport header cut before its length (``unknown_length``)."""
(
    USED,
    OTHER_DIRECTION,
    COALESCED_ACK,
    CONTROL,
    RETRANSMISSION,
    OUT_OF_ORDER,
    NOT_TCP_UDP,
    NOT_SERVER,
    NO_TIMESTAMP,
    UNKNOWN_LENGTH,
) = range(len(BUCKETS))

NO_GAP = -1
"""What :func:`next_gap` returns when a packet ends no gap."""


def packet_kinds(
    packets, conns: Connections, excluded: np.ndarray, params: PirateParams
) -> np.ndarray:
    """The bucket of every packet that can be told without per-connection state (uint8 codes
    into :data:`BUCKETS`; ``used`` packets may still turn out to be retransmissions or out of
    order in :func:`next_gap`). ``excluded``: per connection, set aside (no given server)."""
    conn = conns.row_connection
    has = conn >= 0
    flags = packets.tcp_flags
    payload = packets.payload_len
    tcp = packets.proto == TCP
    control = tcp & (payload == 0) & ((flags & (SYN | FIN | RST)) != 0)
    ack = (tcp & (payload == 0) & ((flags & (SYN | FIN | RST)) == 0)) | (
        (packets.proto == UDP) & (payload <= params.udp_ack_max_payload)
    )
    if not params.coalesce_acks:
        ack[:] = False
    kind = np.full(len(packets), USED, dtype=np.uint8)
    # Later assignments win: they go from the least to the most fundamental reason.
    kind[ack] = COALESCED_ACK
    kind[control] = CONTROL
    kind[payload < 0] = UNKNOWN_LENGTH
    kind[packets.time == NO_TIME] = NO_TIMESTAMP
    kind[has & ~conns.to_server] = OTHER_DIRECTION
    ex = np.zeros(len(packets), dtype=bool)
    ex[has] = excluded[conn[has]]
    kind[ex] = NOT_SERVER
    kind[~has] = NOT_TCP_UDP
    return kind


@njit(cache=True, inline="always")
def _fills_hole(c, seq, end, hole_lo, hole_hi):  # pragma: no cover - compiled
    """Whether ``[seq, end)`` lies in connection ``c``'s hole; if so, the hole keeps what is
    above it (or below it, when it reaches the hole's end)."""
    if np.int32(seq - hole_lo[c]) < 0 or np.int32(hole_hi[c] - end) < 0 or hole_lo[c] == hole_hi[c]:
        return False
    if end == hole_hi[c]:
        hole_hi[c] = seq
    else:
        hole_lo[c] = end
    return True


@njit(cache=True, inline="always")
def next_gap(  # noqa: C901
    c,
    t,
    payload,
    seq,
    tcp,
    min_full,
    taint_after,
    burst_gap,
    last_time,
    last_full,
    full_size,
    high_seq,
    seq_seen,
    tainted,
    burst_start,
    hole_lo,
    hole_hi,
):  # pragma: no cover - compiled
    """Take one ``used`` packet of connection ``c`` (time ``t``, ``payload`` bytes, TCP ``seq``
    when ``tcp``; TCP packets without payload are not checked for retransmission) into the
    connection's state. Returns ``(bucket, gap, candidate)``: the bucket is ``USED``,
    ``RETRANSMISSION`` or ``OUT_OF_ORDER``; the gap this packet ends (ns) or :data:`NO_GAP`
    (its connection's first packet, or a retransmission came in between); ``candidate``: the
    packet before it was not full-size. A packet counts as full-size when its payload reaches
    ``min_full`` and the connection's largest so far.

    A *burst* is a run of packets at most ``burst_gap`` ns apart. A gap longer than that is
    measured from the first packet of the burst before it rather than from its last packet: a
    pipelining client sends the requests one response triggers back to back, and the next
    response to come (and so the request it triggers) answers the *first* of them, so the causal
    pair starts at the burst's start. With ``burst_gap`` 0 every gap is the plain inter-packet
    gap (Pirate as published).

    State per connection: time of the last used packet (``NO_TIME`` before the first), whether
    it was full-size, the largest payload so far, the TCP sequence number after the highest data
    so far (``seq_seen`` once there is one), the start of the current burst, ``tainted``: a
    retransmission came since the last used packet, more than ``taint_after`` ns after it
    (sooner, it is taken for an original that the capture saw late, within its burst, and taints
    nothing), and the connection's latest *hole*, ``[hole_lo, hole_hi)``: data the capture
    skipped when a packet came with a sequence number past the highest (empty when the two are
    equal). A packet inside the hole that comes within ``taint_after`` of the last used packet
    carries data the capture has not seen (an original the network reordered, or a fast
    retransmission of a packet lost before the capture point), so it is used, at the time it
    came, and the hole shrinks. Later, it is a retransmission after a timeout, as above. One
    hole is kept; a new skip replaces it.
    """
    if last_time[c] != NO_TIME and t < last_time[c]:
        return OUT_OF_ORDER, NO_GAP, False
    if tcp and payload > 0:
        end = np.uint32(seq + payload)
        if seq_seen[c] and np.int32(end - high_seq[c]) <= 0:
            soon = t - last_time[c] <= taint_after
            if not (soon and _fills_hole(c, np.uint32(seq), end, hole_lo, hole_hi)):
                if not soon:
                    tainted[c] = True
                return RETRANSMISSION, NO_GAP, False
        else:
            if seq_seen[c] and np.int32(np.uint32(seq) - high_seq[c]) > 0:
                hole_lo[c] = high_seq[c]  # data skipped: the connection's hole, for now
                hole_hi[c] = np.uint32(seq)
            high_seq[c] = end
            seq_seen[c] = True
    gap = NO_GAP
    candidate = not last_full[c]
    if last_time[c] == NO_TIME or t - last_time[c] > burst_gap:
        if last_time[c] != NO_TIME and not tainted[c]:
            gap = t - (burst_start[c] if burst_gap > 0 else last_time[c])
        burst_start[c] = t
    elif not tainted[c]:
        gap = t - last_time[c]
    if payload > full_size[c]:
        full_size[c] = payload
    last_full[c] = payload >= full_size[c] and full_size[c] >= min_full
    last_time[c] = t
    tainted[c] = False
    return USED, gap, candidate

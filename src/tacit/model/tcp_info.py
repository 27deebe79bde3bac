"""TCP connection statistics: the kernel's ``tcp_info`` of connections, sampled, as columns.

YTrace (Kanuparthy et al., "End-to-end Performance Diagnosis in Large Cloud and Content
Providers", "CDN instrumentation") snapshots the ``tcp_info`` of the TCP connections user
requests use — retransmissions, RTT, windows — to tell Internet-path and client bottlenecks
from slow serving. Linux reports them per socket (printed by ``ss -tin``:
:mod:`tacit.formats.ss`); this module holds the table they are read into.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tacit.model.columns import ColumnTable, StringPool


@dataclass
class TcpInfoTable(ColumnTable):
    """One row per connection per snapshot. Times are int64 ns; absent values are -1.

    ``sample`` numbers the snapshots, ``time`` is the snapshot's (-1 when unknown) and ``line``
    the row's line in its input. ``state``, ``local``, ``peer`` (``ip:port``) and ``cc`` (the
    congestion control algorithm) are codes into ``strings``. ``retrans_now``/``retrans_total``
    are segments retransmitted and not yet acknowledged / retransmitted over the connection's
    life; ``rtt``/``rttvar`` are the smoothed RTT and its mean deviation (RFC 6298), ``minrtt``
    the smallest RTT seen; ``lastsnd``/``lastrcv``/``lastack`` the time since the last send,
    receive and acknowledgement; the ``*_bps`` columns are rates in bits per second.
    """

    COLUMNS: ClassVar[dict[str, type]] = {
        "sample": np.int32,
        "time": np.int64,
        "line": np.int32,
        "state": np.int32,
        "local": np.int32,
        "peer": np.int32,
        "cc": np.int32,
        "recv_q": np.int64,
        "send_q": np.int64,
        "rtt": np.int64,
        "rttvar": np.int64,
        "rto": np.int64,
        "ato": np.int64,
        "minrtt": np.int64,
        "rcv_rtt": np.int64,
        "lastsnd": np.int64,
        "lastrcv": np.int64,
        "lastack": np.int64,
        "cwnd": np.int64,
        "ssthresh": np.int64,
        "mss": np.int64,
        "bytes_sent": np.int64,
        "bytes_retrans": np.int64,
        "bytes_acked": np.int64,
        "bytes_received": np.int64,
        "segs_out": np.int64,
        "segs_in": np.int64,
        "data_segs_out": np.int64,
        "data_segs_in": np.int64,
        "lost": np.int64,
        "unacked": np.int64,
        "notsent": np.int64,
        "send_bps": np.int64,
        "delivery_bps": np.int64,
        "pacing_bps": np.int64,
        "retrans_now": np.int64,
        "retrans_total": np.int64,
    }
    strings: StringPool
    sample: np.ndarray
    time: np.ndarray
    line: np.ndarray
    state: np.ndarray
    local: np.ndarray
    peer: np.ndarray
    cc: np.ndarray
    recv_q: np.ndarray
    send_q: np.ndarray
    rtt: np.ndarray
    rttvar: np.ndarray
    rto: np.ndarray
    ato: np.ndarray
    minrtt: np.ndarray
    rcv_rtt: np.ndarray
    lastsnd: np.ndarray
    lastrcv: np.ndarray
    lastack: np.ndarray
    cwnd: np.ndarray
    ssthresh: np.ndarray
    mss: np.ndarray
    bytes_sent: np.ndarray
    bytes_retrans: np.ndarray
    bytes_acked: np.ndarray
    bytes_received: np.ndarray
    segs_out: np.ndarray
    segs_in: np.ndarray
    data_segs_out: np.ndarray
    data_segs_in: np.ndarray
    lost: np.ndarray
    unacked: np.ndarray
    notsent: np.ndarray
    send_bps: np.ndarray
    delivery_bps: np.ndarray
    pacing_bps: np.ndarray
    retrans_now: np.ndarray
    retrans_total: np.ndarray

    def connection_keys(self) -> list[str]:
        """``LOCAL PEER`` of every row: the key that joins RPCs to their connection."""
        s = self.strings
        return [
            f"{s[a]} {s[b]}" for a, b in zip(self.local.tolist(), self.peer.tolist(), strict=True)
        ]

"""Hand-made packet tables for the Pirate tests: a few fields per packet, the rest zero."""

from __future__ import annotations

import numpy as np

from tacit.model.columns import StringPool
from tacit.model.packets import _COLUMNS, ACK, PSH, TCP, PacketTable, parse_endpoint

MS = 1_000_000
T0 = 1_714_521_600 * 10**9
CLIENT, SERVER = "10.0.0.2:40000", "10.0.0.1:443"


def packet_table(rows: list[dict]) -> PacketTable:
    """One packet per dict: ``t`` (ns), ``src``/``dst`` ("ADDR:PORT"), ``flags``, ``payload``,
    ``seq``, ``proto`` (default TCP, ACK|PSH, 0, 0)."""
    n = len(rows)
    cols = {k: np.zeros(n, dtype=t) for k, t in _COLUMNS.items()}
    for i, r in enumerate(rows):
        s_hi, s_lo, s_port = parse_endpoint(r["src"])
        d_hi, d_lo, d_port = parse_endpoint(r["dst"])
        cols["time"][i] = r["t"]
        cols["record"][i] = i
        cols["ip_version"][i] = 6 if ":" in r["src"].rsplit(":", 1)[0] else 4
        cols["src_hi"][i], cols["src_lo"][i], cols["sport"][i] = s_hi, s_lo, s_port
        cols["dst_hi"][i], cols["dst_lo"][i], cols["dport"][i] = d_hi, d_lo, d_port
        cols["proto"][i] = r.get("proto", TCP)
        cols["tcp_flags"][i] = r.get("flags", ACK | PSH)
        cols["payload_len"][i] = r.get("payload", 0)
        cols["seq"][i] = r.get("seq", 0)
    return PacketTable(StringPool(), **cols)


def request_response(
    latencies_ns: list[int],
    *,
    segments: tuple[int, ...] = (1448, 300),
    acks_in_pause: int = 0,
    start: int = T0,
    src: str = CLIENT,
    dst: str = SERVER,
    spacing_ns: int = 100_000,
) -> PacketTable:
    """A client that sends a request of ``segments`` (back to back, ``spacing_ns`` apart), waits
    each latency in turn (its pure ACKs, ``acks_in_pause`` of them, spread over the pause),
    and sends the next request; one request more than latencies. The gap after each request's
    last segment is exactly the latency; the causal pair, from a request's first segment to the
    next request's, is longer by the burst (:func:`causal_gap`)."""
    rows, t, seq = [], start, 1000
    for k in range(len(latencies_ns) + 1):
        for j, seg in enumerate(segments):
            if j:
                t += spacing_ns
            rows.append({"t": t, "src": src, "dst": dst, "payload": seg, "seq": seq})
            seq += seg
        if k == len(latencies_ns):
            break
        lat = latencies_ns[k]
        for a in range(acks_in_pause):
            at = t + lat * (a + 1) // (acks_in_pause + 1)
            rows.append({"t": at, "src": src, "dst": dst, "flags": ACK, "seq": seq})
        t += lat
    return packet_table(rows)


def causal_gap(
    latency_ns: int, segments: tuple[int, ...] = (1448, 300), spacing_ns: int = 100_000
) -> int:
    """The causal-pair gap of :func:`request_response`: first segment to the next request's."""
    return latency_ns + spacing_ns * (len(segments) - 1)

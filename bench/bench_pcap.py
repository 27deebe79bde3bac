"""Benchmark: reading packet captures — packets per second end to end, against dpkt.

Prints one JSON object:
- ``warmup_seconds``: the first reads of a tiny pcap and pcapng file, which compile the numba
  walk or load it from numba's cache (``warmup_compiled`` says which); not counted below.
- ``real``: per capture of ../shared/data/pcap, packets per second of :func:`read_packets` from
  the file (gunzip included, best of three), and of dpkt decoding the same records to the same
  fields (Ethernet, IP, TCP/UDP, TCP options), and their ratio. Skipped (with the reason) when
  ../shared/data is absent.
- ``synthetic``: a 2 M packet capture of small TCP segments, written once to a temporary file
  with :func:`write_pcap`: packets per second of the whole-file read, of the chunked read, and
  of dpkt on its first 200,000 packets; the peak traced memory of the whole-file read
  (tracemalloc) against the file size. The target is 500,000 packets per second on one core.
"""

from __future__ import annotations

import gzip
import itertools
import json
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import dpkt

from tacit.formats import pcap
from tacit.formats.pcap import iter_packet_chunks, read_packets
from tacit.formats.pcap_write import build_frame, tcp_options, write_pcap, write_pcapng
from tacit.model.packets import ACK, PSH

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pcap"
SYNTHETIC_PACKETS = 2_000_000
DPKT_PACKETS = 200_000
T0 = 1_714_521_600 * 10**9


def frames(n: int) -> list[bytes]:
    """``n`` distinct small TCP segments between 50 client ports and a server, 0-63 bytes."""
    return [
        build_frame(
            "10.0.0.1",
            "10.0.0.2",
            sport=40000 + i % 50,
            dport=6379,
            seq=i * 64,
            ack=i,
            flags=ACK | PSH,
            ip_id=i & 0xFFFF,
            payload=b"x" * (i % 64),
            options=tcp_options(ts=(i, i)),
        )
        for i in range(n)
    ]


def warmup(tmp: Path) -> float:
    t0 = time.perf_counter()
    small = frames(4)
    times = [T0 + i for i in range(4)]
    write_pcap(tmp / "w.pcap", small, times)
    write_pcapng(tmp / "w.pcapng", small, times)
    read_packets(tmp / "w.pcap")
    read_packets(tmp / "w.pcapng")
    list(iter_packet_chunks(tmp / "w.pcap", 2))
    return time.perf_counter() - t0


def best_of(n: int, fn) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def dpkt_decode(path: Path, limit: int) -> int:
    """Decode up to ``limit`` records with dpkt into the fields read_packets gives; returns
    the number of records."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    rows = []
    n = 0
    with opener(path, "rb") as f:
        reader = dpkt.pcapng.Reader(f) if ".pcapng" in path.name else dpkt.pcap.Reader(f)
        for ts, frame in itertools.islice(reader, limit):
            n += 1
            ip = dpkt.ethernet.Ethernet(frame).data
            if not isinstance(ip, dpkt.ip.IP | dpkt.ip6.IP6):
                continue
            t = ip.data
            row = [ts, ip.src, ip.dst, ip.p, len(frame)]
            if isinstance(t, dpkt.tcp.TCP):
                row += [t.sport, t.dport, t.seq, t.ack, t.flags, t.win, len(t.data)]
                row += [dpkt.tcp.parse_opts(t.opts)]
            elif isinstance(t, dpkt.udp.UDP):
                row += [t.sport, t.dport, len(t.data)]
            rows.append(row)
    return n


def compare(path: Path, dpkt_limit: int) -> dict:
    packets = len(read_packets(path).packets)
    ours = best_of(3, lambda: read_packets(path))
    t0 = time.perf_counter()
    n = dpkt_decode(path, dpkt_limit)
    theirs = (time.perf_counter() - t0) / n
    records = read_packets(path).accounting.records
    pps = records / ours
    return {
        "records": records,
        "ip_packets": packets,
        "packets_per_second": round(pps),
        "dpkt_packets_per_second": round(1 / theirs),
        "dpkt_records": n,
        "speedup_vs_dpkt": round(pps * theirs, 1),
    }


def real() -> dict:
    if not DATA.is_dir():
        return {"skipped": f"{DATA} not found"}
    out = {}
    for path in sorted(DATA.glob("*.pcap*")):
        out[path.name] = compare(path, DPKT_PACKETS)
        print(path.name, json.dumps(out[path.name]), file=sys.stderr)
    return out


def synthetic(tmp: Path) -> dict:
    path = tmp / "synthetic.pcap"
    distinct = frames(1000)
    stream = (distinct[i % 1000] for i in range(SYNTHETIC_PACKETS))
    t0 = time.perf_counter()
    write_pcap(path, stream, range(T0, T0 + 1000 * SYNTHETIC_PACKETS, 1000))
    written = time.perf_counter() - t0
    row = compare(path, DPKT_PACKETS)
    chunked = best_of(3, lambda: sum(1 for _ in iter_packet_chunks(path, 500_000)))
    tracemalloc.start()
    read = read_packets(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    row |= {
        "write_seconds": round(written, 2),
        "chunked_packets_per_second": round(SYNTHETIC_PACKETS / chunked),
        "file_mb": round(path.stat().st_size / 2**20, 1),
        "table_mb": round(sum(v.nbytes for v in read.packets.columns().values()) / 2**20, 1),
        "peak_traced_memory_mb": round(peak / 2**20, 1),
    }
    print("synthetic", json.dumps(row), file=sys.stderr)
    return row


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        result = {"benchmark": "pcap", "warmup_seconds": round(warmup(tmp), 2)}
        walks = (pcap._walk_pcap, pcap._walk_pcapng)
        result["warmup_compiled"] = any(sum(w.stats.cache_misses.values()) for w in walks)
        result["real"] = real()
        result["synthetic"] = synthetic(tmp)
    result["target_packets_per_second"] = 500_000
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

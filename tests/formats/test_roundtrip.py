"""Round trips through every writer and its reader, on random tables: what a writer puts down,
its reader gives back, on every column the format carries.

Each format states what it does not carry (and what it normalizes); everything else must come
back exactly. Tables are random but valid: names with any Unicode, quotes, separators and line
breaks; int64 ns times from the epoch to 2100; parent links forming forests within a trace;
kinds and optional fields present or not; gzip on and off.
"""

from __future__ import annotations

import csv
import io
import ipaddress
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tacit.formats import WRITE_FORMATS, detect_format, observe, read_spans, write_traces
from tacit.formats.blind import write_blind
from tacit.formats.messagetable import TIME_FORMATS, read_message_table, write_message_table
from tacit.formats.pcap import read_packets
from tacit.formats.pcap_write import write_packets
from tacit.formats.socketevents import (
    CALL_ALIASES,
    KIND_CODES,
    KIND_NAMES,
    RECV,
    SEND,
    read_event_lines,
    write_event_lines,
)
from tacit.formats.spancsv import COLUMNS as CSV_COLUMNS
from tacit.formats.spancsv import workload_name
from tacit.formats.textio import write_bytes
from tacit.model.messages import MISSING, MessageTable
from tacit.model.packets import TCP, UDP, PacketTable, parse_address
from tacit.model.roles import infer_roles
from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER, UNKNOWN, SpanTable, StringPool
from tacit.reconstruct.assemble import EVIDENCE_TAGS
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.pipeline import reconstruct_blind
from tacit.simulate import load_app, simulate

EPOCH_2100_NS = 4_102_444_800 * 10**9
"""Times are drawn from the epoch to 2100: what captures and exports hold."""
US = 1000

# --- names -----------------------------------------------------------------------------------

names = st.one_of(
    st.text(min_size=1, max_size=12),
    st.text(alphabet=",\"'\\\n\r\t :;{}[]<>/=é中🙂", min_size=1, max_size=6),
    st.sampled_from(["frontend", "cart", "GET /", "a,b", 'say "hi"', "line\nbreak", "root"]),
)
"""Names as exports hold them: any Unicode, and the characters each format must escape."""

addresses = st.sampled_from(
    [
        "10.0.0.1",
        "10.0.0.1:8080",
        "10.0.0.1:080",
        "::1",
        "[::1]:443",
        "FE80::1",
        "0:0::1",
        "[2001:db8::1]:0",
        "::ffff:10.0.0.1",
    ]
)
"""Instances that are addresses, canonical or not (Zipkin puts addresses in its endpoints)."""


def distinct_ids(width: int, min_size: int = 0) -> st.SearchStrategy[list[str]]:
    """Distinct ids as tracers write them: hex of any case and width up to ``width`` digits and
    a little beyond (which no writer keeps), or any other string. Hex ids are distinct as
    numbers: tracers compare them as numbers."""

    def render(value: int, digits: int, upper: bool) -> str:
        text = f"{value:0{digits}x}"
        return text.upper() if upper else text

    hex_id = st.builds(
        render, st.integers(0, 16 ** (width + 2) - 1), st.integers(1, width + 2), st.booleans()
    )
    other = st.text(min_size=1, max_size=8).filter(lambda s: not _is_hex(s))
    return st.lists(
        st.one_of(hex_id, other),
        unique_by=lambda s: int(s, 16) if _is_hex(s) else s,
        min_size=min_size,
        max_size=min_size + 4,
    )


def _is_hex(s: str) -> bool:
    return bool(s) and all(c in "0123456789abcdefABCDEF" for c in s)


# --- span tables -----------------------------------------------------------------------------


@st.composite
def span_tables(draw: st.DrawFn) -> SpanTable:
    """A valid span table: parents form a forest (rows in random order), every tree in one
    trace (several trees may share one), span ids unique within a trace or absent, starts
    distinct to the microsecond so that rows can be matched after a reader reorders them."""
    n = draw(st.integers(0, 10))
    pool = StringPool()
    service_names = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    instance_names = draw(st.lists(st.one_of(names, addresses), max_size=4, unique=True))
    endpoint_names = draw(st.lists(st.one_of(names, st.just("")), min_size=1, max_size=4))
    # A forest: each row's parent is an earlier row or none; then the rows are shuffled.
    parent = [draw(st.integers(-1, i - 1)) if i else -1 for i in range(n)]
    order = draw(st.permutations(range(n)))
    where = {old: new for new, old in enumerate(order)}
    parent = [where[parent[old]] if parent[old] >= 0 else NONE for old in order]
    tree = list(range(n))
    for r in range(n):  # the root of each row, by walking up
        while parent[tree[r]] != NONE:
            tree[r] = parent[tree[r]]
    trace_ids = [None, *draw(distinct_ids(32))]
    trace_of_root = {r: draw(st.sampled_from(trace_ids)) for r in range(n) if parent[r] == NONE}
    trace = [trace_of_root[tree[r]] for r in range(n)]
    ids = draw(distinct_ids(16, min_size=n))
    span_id = [ids[r] if draw(st.booleans()) else None for r in range(n)]  # or absent
    start_us = draw(
        st.lists(st.integers(0, EPOCH_2100_NS // US), min_size=n, max_size=n, unique=True)
    )
    start = [s * US + draw(st.integers(0, US - 1)) for s in start_us]
    end = [s + draw(st.integers(0, 10**10)) for s in start]
    services = [draw(st.sampled_from(service_names)) for _ in range(n)]
    return SpanTable(
        pool,
        service=[pool.code(s) for s in services],
        instance=[pool.code(draw(st.sampled_from([s, *instance_names]))) for s in services],
        endpoint=[pool.code(draw(st.sampled_from(endpoint_names))) for _ in range(n)],
        kind=[draw(st.sampled_from([SERVER, CLIENT, INTERNAL, UNKNOWN])) for _ in range(n)],
        start=start,
        end=end,
        peer=[pool.code(draw(st.none() | st.sampled_from(service_names))) for _ in range(n)],
        thread=[draw(st.just(NONE) | st.integers(0, 2**63 - 1)) for _ in range(n)],
        trace=[pool.code(t) for t in trace],
        span_id=[pool.code(s) for s in span_id],
        parent=parent,
        link=[NONE] * n,
        record=list(range(1, n + 1)),
    )


def blind_view(t: SpanTable, pair: list[bool]) -> SpanTable:
    """What blind spans hold of ``t``: server and client spans (any other kind made a client),
    the two sides of some RPCs linked (``pair``: which server-client pairs, in row order, when
    they are in different processes)."""
    t = t.take(np.arange(len(t)))
    t.kind[t.kind != SERVER] = CLIENT
    servers = np.flatnonzero(t.kind == SERVER)
    clients = np.flatnonzero(t.kind == CLIENT)
    for s, c, linked in zip(servers, clients, pair, strict=False):
        other_process = (t.service[s], t.instance[s]) != (t.service[c], t.instance[c])
        if linked and other_process:
            t.link[s], t.link[c] = c, s
    return t


span_tags = st.dictionaries(
    st.sampled_from(EVIDENCE_TAGS),
    st.one_of(names, st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.booleans()),
)
"""Tags as ``tacit reconstruct`` adds them to its traces: no reader takes them back, and they
must not disturb what it does take."""


@dataclass(frozen=True)
class SpanFormat:
    """A span format and what it carries.

    ``time_us``: times in whole microseconds (starts rounded down, ends up), ``min_us`` the
    shortest duration it writes; ``ids``: trace and span ids and parents; ``hex_ids``: only hex
    ids of up to 32 and 16 digits are kept, lower-cased and zero-padded, any other id replaced,
    the traces and parents it made kept (else every id present is kept as it is); ``kinds``,
    ``peer``, ``thread``: those columns; ``links``: ``link`` (blind spans, as RPC numbers; no
    trace format carries it). No format carries ``record``: a reader numbers its own records.
    """

    name: str
    suffix: str
    write: Callable[[Path, SpanTable, dict[int, dict[str, Any]]], None]
    time_us: bool = False
    min_us: int = 0
    ids: bool = True
    hex_ids: bool = True
    kinds: bool = True
    peer: bool = True
    thread: bool = True
    links: bool = False

    def __repr__(self) -> str:
        return self.name


def _trace_writer(fmt: str):
    return lambda path, spans, tags: write_traces(path, spans, tags, format=fmt)


def _write_span_csv(path: Path, spans: SpanTable, tags: dict) -> None:
    """The CSV span tables of the Nezha datasets (tacit reads them; the datasets write them).

    Absent span ids are written ``row<N>``, absent trace ids empty."""
    buf = io.StringIO()
    w = csv.writer(buf)  # lines end in CRLF, so that fields with a CR are quoted
    w.writerow(CSV_COLUMNS)
    ids = [spans.name("span_id", r) or f"row{r}" for r in range(len(spans))]
    for r in range(len(spans)):
        p = int(spans.parent[r])
        trace = spans.name("trace", r) or ""
        parent = ids[p] if p != NONE else "root"
        pod, op = spans.name("instance", r), spans.name("endpoint", r)
        w.writerow([trace, ids[r], parent, pod, op, int(spans.start[r]), int(spans.end[r])])
    Path(path).write_bytes(buf.getvalue().encode())


SPAN_FORMATS = [
    SpanFormat("jaeger", ".json", _trace_writer("jaeger"), time_us=True),
    SpanFormat("zipkin", ".json", _trace_writer("zipkin"), time_us=True, min_us=1),
    SpanFormat("otlp", ".json", _trace_writer("otlp")),
    SpanFormat(
        "blind",
        ".jsonl",
        lambda path, spans, tags: write_blind(path, spans),
        ids=False,
        links=True,
    ),
    SpanFormat(
        "csv", ".csv", _write_span_csv, hex_ids=False, kinds=False, peer=False, thread=False
    ),
]
"""Every span format with a writer, and CSV span tables, written here as the datasets do."""


def expected_spans(fmt: SpanFormat, t: SpanTable) -> dict[str, list]:
    """What reading ``t`` back in ``fmt`` gives, column by column (names for string codes)."""
    n = range(len(t))
    start, end = t.start.tolist(), t.end.tolist()
    if fmt.time_us:
        start = [s // US * US for s in start]
        end = [max(-(-e // US) * US, s + fmt.min_us * US) for s, e in zip(start, end, strict=True)]
    out: dict[str, list] = {
        "service": [t.name("service", r) for r in n],
        "instance": [t.name("instance", r) for r in n],
        "endpoint": [t.name("endpoint", r) for r in n],
        "kind": t.kind.tolist() if fmt.kinds else [UNKNOWN] * len(t),
        "start": start,
        "end": end,
        "peer": [t.name("peer", r) if fmt.peer else None for r in n],
        "thread": t.thread.tolist() if fmt.thread else [NONE] * len(t),
    }
    if fmt.name == "csv":  # the pod is the instance; the service its workload
        out["service"] = [workload_name(p) for p in out["instance"]]
    return out


def _kept_id(value: str | None, width: int, hex_ids: bool) -> str | None:
    """The id a writer keeps (hex of up to ``width`` digits as ``hex_ids`` writes it, when the
    format has only such ids); None for one it replaces."""
    if not hex_ids or value is None:
        return value
    if _is_hex(value) and len(value) <= width:
        return value.lower().rjust(width, "0")
    return None


def spans_of(rows: list[tuple[str, str | None, str | None, int]]) -> SpanTable:
    """A table of (instance, trace id, span id, parent row) rows, 1 ms apart, of service
    ``svc``; for regression examples."""
    pool = StringPool()
    n = len(rows)
    return SpanTable(
        pool,
        service=[pool.code("svc")] * n,
        instance=[pool.code(r[0]) for r in rows],
        endpoint=[pool.code("op")] * n,
        kind=[SERVER] * n,
        start=[10**18 + 10**6 * i for i in range(n)],
        end=[10**18 + 10**6 * i + 500 for i in range(n)],
        peer=[NONE] * n,
        thread=[NONE] * n,
        trace=[pool.code(r[1]) for r in rows],
        span_id=[pool.code(r[2]) for r in rows],
        parent=[r[3] for r in rows],
        link=[NONE] * n,
        record=list(range(1, n + 1)),
    )


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("fmt", SPAN_FORMATS, ids=repr)
@settings(max_examples=25, deadline=None)
@given(
    spans=span_tables(),
    pair=st.lists(st.booleans(), max_size=10),
    tags=st.dictionaries(st.integers(0, 9), span_tags),
)
# A replacement id (row + 1) was the id of another span of the trace, or of another trace.
@example(
    spans=spans_of([("svc", "1", None, -1), ("svc", "1", None, 0), ("svc", "1", "2", -1)]),
    pair=[],
    tags={},
)
@example(spans=spans_of([("svc", "x", "a", -1), ("svc", "1", "b", -1)]), pair=[], tags={})
# Zipkin's endpoint wrote an address instance in its canonical form, not as it was.
@example(
    spans=spans_of([("10.0.0.1:080", "1", "1", -1), ("0:0::1", "1", "2", 0)]), pair=[], tags={}
)
# An infinite float tag was written as Infinity, which is not JSON.
@example(spans=spans_of([("svc", "1", "1", -1)]), pair=[], tags={0: {"tacit.score": -math.inf}})
def test_span_formats_round_trip(
    fmt: SpanFormat, gz: bool, spans: SpanTable, pair: list[bool], tags: dict
) -> None:
    if fmt.links:
        spans = blind_view(spans, pair)
    tags = {r: t for r, t in tags.items() if r < len(spans)}
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / f"spans{fmt.suffix}{'.gz' if gz else ''}"
        fmt.write(path, spans, tags)
        if len(spans):
            assert detect_format(path) == fmt.name
        got = read_spans(path, fmt.name)
    assert len(got) == len(spans)
    # Readers may reorder rows (by trace, by process): match them by start, distinct to the µs.
    row_of = {s // US: r for r, s in enumerate(spans.start.tolist())}
    to = np.array([row_of[s // US] for s in got.start.tolist()], dtype=np.int64)
    back = np.empty_like(to)
    back[to] = np.arange(len(to))
    expected = expected_spans(fmt, spans)
    for column, values in expected.items():
        col = getattr(got, column)
        if column in ("service", "instance", "endpoint", "peer"):
            read = [got.strings[int(c)] for c in col[back]]
        else:
            read = col[back].tolist()
        assert read == values, column
    if fmt.ids:
        check_trace_structure(spans, got, to, back, fmt.hex_ids)
    else:
        for column in ("trace", "span_id", "parent"):
            assert np.all(getattr(got, column) == NONE), column
    if fmt.links:  # RPCs' two sides stay linked
        mapped = np.where(got.link[back] != NONE, to[got.link[back]], NONE)
        assert mapped.tolist() == spans.link.tolist()


def check_trace_structure(
    spans: SpanTable, got: SpanTable, to: np.ndarray, back: np.ndarray, hex_ids: bool
) -> None:
    """Parents, the partition into traces, and the ids a writer keeps (``to``/``back``: rows of
    ``got`` to rows of ``spans`` and back)."""
    parent = got.parent[back]
    assert np.where(parent != NONE, to[parent], NONE).tolist() == spans.parent.tolist()
    ours, theirs = spans.trace.tolist(), got.trace[back].tolist()
    for a, b in itertools.combinations(range(len(spans)), 2):
        assert (ours[a] == ours[b]) == (theirs[a] == theirs[b]), (a, b)
    for r in range(len(spans)):
        for column, width in (("trace", 32), ("span_id", 16)):
            kept = _kept_id(spans.name(column, r), width, hex_ids)
            if kept is not None:
                assert got.name(column, int(back[r])) == kept, column


# --- message tables --------------------------------------------------------------------------

times = st.integers(0, EPOCH_2100_NS)
optional_names = st.none() | names


@st.composite
def message_tables(draw: st.DrawFn) -> MessageTable:
    """Messages with at least one time each; endpoints, hosts, sizes and flows optional."""
    n = draw(st.integers(0, 8))
    pool = StringPool()

    def codes(values: st.SearchStrategy[str | None]) -> list[int]:
        return [pool.code(draw(values)) for _ in range(n)]

    send = [draw(st.just(MISSING) | times) for _ in range(n)]
    recv = [draw(times if s == MISSING else st.just(MISSING) | times) for s in send]
    return MessageTable(
        pool,
        src=codes(names),
        dst=codes(names),
        src_host=codes(optional_names),
        dst_host=codes(optional_names),
        src_endpoint=codes(optional_names),
        dst_endpoint=codes(optional_names),
        send=send,
        recv=recv,
        size=[draw(st.just(-1) | st.integers(0, 2**63 - 1)) for _ in range(n)],
        flow=[draw(st.just(-1) | st.integers(0, 2**63 - 1)) for _ in range(n)],
        record=list(range(n)),
    )


def messages_of(*nodes: str) -> MessageTable:
    """One message from each of ``nodes`` to the next; for regression examples."""
    pool = StringPool(nodes)
    n = len(nodes) - 1
    none = [NONE] * n
    return MessageTable(
        pool,
        src=range(n),
        dst=range(1, n + 1),
        **dict.fromkeys(("src_host", "dst_host", "src_endpoint", "dst_endpoint"), none),
        send=[10**18] * n,
        recv=[10**18 + 1] * n,
        size=none,
        flow=none,
        record=range(n),
    )


FLOAT_SECONDS = {("jsonl", "seconds"), ("parquet", "seconds")}
"""Where times are written as float seconds: exact to float precision only."""


@pytest.mark.parametrize("time_format", TIME_FORMATS)
@pytest.mark.parametrize(
    "suffix", [".csv", ".csv.gz", ".jsonl", ".ndjson.gz", ".parquet"], ids=lambda s: s[1:]
)
@settings(max_examples=15, deadline=None)
@given(table=message_tables())
# A name with a CR was written unquoted in CSV; one with U+2028 cut its JSON line in two.
@example(table=messages_of("a\rb", "c\u2028d"))
def test_message_tables_round_trip(suffix: str, time_format: str, table: MessageTable) -> None:
    """Every column comes back, but that an absent host reads as its node (the documented
    default) and ``record`` numbers the lines or rows of the file."""
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / f"messages{suffix}"
        write_message_table(path, table, time_format=time_format)
        got = read_message_table(path)
    assert len(got) == len(table)

    def names_of(t: MessageTable, column: str) -> list[str | None]:
        return [t.strings[int(c)] for c in getattr(t, column)]

    for column in ("src", "dst", "src_endpoint", "dst_endpoint"):
        assert names_of(got, column) == names_of(table, column), column
    for column, node in (("src_host", "src"), ("dst_host", "dst")):
        want = [h or n for h, n in zip(names_of(table, column), names_of(table, node), strict=True)]
        assert names_of(got, column) == want, column
    for column in ("size", "flow"):
        assert getattr(got, column).tolist() == getattr(table, column).tolist(), column
    fmt = suffix.split(".")[1].replace("ndjson", "jsonl")
    for column in ("send", "recv"):
        want, read = getattr(table, column), getattr(got, column)
        assert np.array_equal(want == MISSING, read == MISSING), column
        if (fmt, time_format) in FLOAT_SECONDS:  # within two float64 rounding steps
            slack = np.maximum(want.astype(float) * 2.0**-51, 1.0)
            assert np.all(np.abs(read - want) <= slack), column
        else:
            assert read.tolist() == want.tolist(), column


# --- socket events ---------------------------------------------------------------------------

ports = st.integers(0, 65535)
ip_port = st.one_of(
    st.builds("{}:{}".format, st.ip_addresses(v=4), ports),
    st.builds("[{}]:{}".format, st.ip_addresses(v=6), ports),
)


@st.composite
def event_lines(draw: st.DrawFn) -> list[dict[str, Any]]:
    """JSON-lines socket events in every accepted spelling (calls by kind or syscall name,
    optional fields absent or null, checksums as integers or content). An fd's protocol is
    given on all its events or on none (then every socket is TCP): a socket does not change
    protocol."""
    hosts = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    calls = sorted([*KIND_NAMES.values(), *CALL_ALIASES])
    protos: dict[tuple[str, int], str | None] = {}
    out = []
    for _ in range(draw(st.integers(0, 12))):
        call = draw(st.sampled_from(calls))
        event: dict[str, Any] = {
            "time": draw(times),
            "host": draw(st.sampled_from(hosts)),
            "fd": draw(st.integers(0, 6)),
            "call": draw(st.sampled_from([call, call.upper()])),
        }
        optional = {
            "pid": st.integers(0, 2**22),
            "bytes": st.integers(0, 2**40),
            "local": st.none() | ip_port,
            "remote": st.none() | ip_port,
            "checksum": st.none() | st.integers(0, 2**32 - 1) | names,
            "node": names,
        }
        for key, values in optional.items():
            if draw(st.booleans()):
                event[key] = draw(values)
        fd = (event["host"], event["fd"])
        if fd not in protos:
            protos[fd] = draw(st.none() | st.sampled_from(["tcp", "udp", "UDP"]))
        if protos[fd] is not None:
            event["proto"] = protos[fd]
        if KIND_CODES.get(call, CALL_ALIASES.get(call)) in (SEND, RECV):
            event.setdefault("bytes", draw(st.integers(0, 2**40)))
        out.append(event)
    return out


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"], ids=["plain", "gzip"])
@settings(max_examples=30, deadline=None)
@given(lines=event_lines())
# A host with U+2028 (which JSON need not escape) cut its line in two.
@example(lines=[{"time": 1, "host": "a\u2028b", "fd": 3, "call": "close"}])
def test_socket_events_round_trip(suffix: str, lines: list[dict[str, Any]]) -> None:
    """Events written back read as they were read: every column (sockets, the addresses and
    protocol each event had, lines) and the accounting. The writer spells every event one
    way (kind names, ``ip:port`` as read, checksums as integers), so the input's spellings
    are what is not carried."""
    with TemporaryDirectory() as tmp:
        first, again = Path(tmp) / f"in{suffix}", Path(tmp) / f"out{suffix}"
        write_bytes(first, b"".join(orjson.dumps(e) + b"\n" for e in lines))
        events = read_event_lines(first)
        write_event_lines(again, events)
        got = read_event_lines(again)
    assert [events.name("host", r) for r in range(len(events))] == [e["host"] for e in lines]
    assert events.time.tolist() == [e["time"] for e in lines]
    assert got.accounting == events.accounting
    for column, values in events.columns().items():
        if column in ("host", "node", "local", "remote"):
            want = [events.strings[int(c)] for c in values]
            assert [got.strings[int(c)] for c in getattr(got, column)] == want, column
        else:
            assert getattr(got, column).tolist() == values.tolist(), column


# --- packets ---------------------------------------------------------------------------------


@st.composite
def packet_tables(draw: st.DrawFn) -> PacketTable:
    """Packets as a simulator makes them: TCP, UDP or other, IPv4 or IPv6, any header values."""
    n = draw(st.integers(0, 8))
    t = PacketTable.allocate(n)
    for values in t.columns().values():
        values[:] = 0
    for i in range(n):
        v6 = draw(st.booleans())
        for side in ("src", "dst"):
            address = draw(st.ip_addresses(v=6 if v6 else 4).filter(_not_v4_mapped))
            hi, lo = parse_address(str(address))
            getattr(t, f"{side}_hi")[i], getattr(t, f"{side}_lo")[i] = hi, lo
        t.ip_version[i] = 6 if v6 else 4
        t.proto[i] = proto = draw(st.sampled_from([TCP, UDP, 1, 132]))
        t.time[i] = draw(times)
        t.payload_len[i] = draw(st.integers(0, 1400))
        t.ip_id[i] = 0 if v6 else draw(st.integers(0, 65535))
        if proto in (TCP, UDP):
            t.sport[i], t.dport[i] = draw(ports), draw(ports)
        if proto == TCP:
            t.seq[i], t.ack[i] = draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 2**32 - 1))
            t.tcp_flags[i] = draw(st.integers(0, 0x1FF))
    return t


def _not_v4_mapped(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """An IPv4-mapped IPv6 address is an IPv4 address in a packet table (one representation for
    both): not an address an IPv6 packet can be written with."""
    return not isinstance(address, ipaddress.IPv6Address) or address.ipv4_mapped is None


CARRIED = (
    "time",
    *("ip_version", "src_hi", "src_lo", "dst_hi", "dst_lo"),
    *("proto", "sport", "dport", "ip_id", "seq", "ack", "tcp_flags", "payload_len"),
)
"""What :func:`write_packets` writes of a row. Not carried: TTL and window (fixed), TCP
options (none), payload bytes (zeros, so ``ident`` is the hash of those), and what the reader
derives (record numbers, lengths, truncation)."""


@pytest.mark.parametrize("suffix", [".pcap", ".pcap.gz"], ids=["plain", "gzip"])
@settings(max_examples=30, deadline=None)
@given(packets=packet_tables())
def test_packet_tables_round_trip(suffix: str, packets: PacketTable) -> None:
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / f"packets{suffix}"
        assert write_packets(path, packets) == len(packets)
        got = read_packets(path).packets
    assert set(CARRIED) < set(PacketTable.COLUMNS)
    for column in CARRIED:
        assert getattr(got, column).tolist() == getattr(packets, column).tolist(), column
    assert got.record.tolist() == list(range(len(packets)))


# --- reconstructed traces --------------------------------------------------------------------


@pytest.fixture(scope="module")
def reconstructed() -> tuple[SpanTable, dict[int, dict]]:
    """What ``tacit reconstruct`` writes: a simulated app's blind spans, reconstructed and
    assembled into traces with their evidence as tags."""
    app = load_app(None)
    graph = learn_callgraph(infer_roles(simulate(app, 20, n_requests=200, seed=7)).spans)
    blind = infer_roles(simulate(app, 50, duration_s=1.0, seed=3)).without_truth()
    traces, tags, _ = reconstruct_blind(blind, graph)
    return traces, tags


@pytest.mark.parametrize("name", ["traces.json", "traces.json.gz"])
@pytest.mark.parametrize("fmt", WRITE_FORMATS)
def test_reconstructed_traces_read_back_as_written(reconstructed, fmt: str, name: str, tmp_path):
    """``evaluate`` (``observe``) reads the traces ``reconstruct`` wrote with the parents they
    were written with. Rows are told apart by their span ids, which assembling gave every
    span (blind spans have none) and the writers keep."""
    traces, tags = reconstructed
    write_traces(tmp_path / name, traces, tags, format=fmt)
    observed, _ = observe([tmp_path / name])
    got = observed.spans
    assert len(got) == len(traces) and not observed.synthesized.any()
    row = {traces.name("span_id", r): r for r in range(len(traces))}
    to = np.array([row[got.name("span_id", r)] for r in range(len(got))])
    assert sorted(to.tolist()) == list(range(len(traces)))
    assert got.kind.tolist() == traces.kind[to].tolist()
    assert np.where(got.parent != NONE, to[got.parent], NONE).tolist() == traces.parent[to].tolist()
    for column in ("service", "instance", "endpoint"):
        names = [traces.name(column, int(r)) for r in to]
        assert [got.name(column, r) for r in range(len(got))] == names, column
    assert len(set(got.trace.tolist())) == len(set(traces.trace.tolist()))

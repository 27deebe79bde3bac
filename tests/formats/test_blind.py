"""Blind spans as JSON lines: no identifiers written, RPC pairs restored on reading, errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from spanrows import span_key
from tacit.errors import InputError
from tacit.formats import detect_format, read_spans
from tacit.formats.blind import (
    LATER,
    blind_lines,
    in_stream_order,
    read_blind,
    read_blind_chunks,
    write_blind,
)
from tacit.model.roles import infer_roles
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.simulate import load_app, simulate

FIELDS = {"service", "instance", "endpoint", "kind", "start_ns", "end_ns", "peer", "rpc", "thread"}


@pytest.fixture(scope="module")
def simulated() -> SpanTable:
    return simulate(load_app(None), 80, n_requests=30, seed=5)


@pytest.fixture(scope="module")
def blind(simulated: SpanTable) -> SpanTable:
    return infer_roles(simulated).without_truth()


def test_file_carries_no_identifiers(
    simulated: SpanTable, blind: SpanTable, tmp_path: Path
) -> None:
    path = tmp_path / "b.jsonl"
    write_blind(path, blind)
    text = path.read_text()
    lines = text.splitlines()
    assert len(lines) == len(blind)
    for line in lines:
        obj = json.loads(line)
        assert set(obj) == FIELDS
        assert obj["kind"] in ("server", "client")
    for word in ("traceID", "traceId", "trace_id", "spanID", "spanId", "span_id", "parent"):
        assert word not in text
    # neither the simulator's trace ids nor its span ids leak into the file
    for code in np.unique(np.concatenate([simulated.trace, simulated.span_id])):
        ident = simulated.strings[int(code)]
        assert ident and ident not in text


def test_round_trip(blind: SpanTable, tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    write_blind(path, blind)
    back = read_blind(path)
    assert len(back) == len(blind)
    assert (back.trace == NONE).all() and (back.span_id == NONE).all()
    assert (back.parent == NONE).all()

    keys = [span_key(blind, r) for r in range(len(blind))]
    assert len(set(keys)) == len(keys)  # so that rows can be matched by content
    row_of = {k: r for r, k in enumerate(keys)}
    back_rows = np.array([row_of[span_key(back, r)] for r in range(len(back))])
    assert sorted(back_rows.tolist()) == list(range(len(blind)))
    for r in range(len(back)):
        o = back_rows[r]
        assert back.name("peer", r) == blind.name("peer", o)
        assert back.thread[r] == blind.thread[o]
        want = int(blind.link[o])
        got = int(back.link[r])
        assert (got == NONE) == (want == NONE)
        if got != NONE:
            assert back_rows[got] == want


def test_client_spans_linked_to_callee_server_span(blind: SpanTable, tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl.gz"
    write_blind(path, blind)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    back = read_blind(path)
    clients = np.flatnonzero(back.kind == CLIENT)
    traced = clients[back.link[clients] != NONE]
    # every client span of the simulated app has a traced callee
    assert len(traced) == len(clients) == int((blind.kind == CLIENT).sum())
    assert int((back.link != NONE).sum()) == int((blind.link != NONE).sum())
    for c in traced:
        s = int(back.link[c])
        assert back.kind[s] == SERVER
        assert back.link[s] == c
        assert back.endpoint[s] == back.endpoint[c]
        assert back.name("service", s) == back.name("peer", c)
        assert back.instance[s] != back.instance[c]


def test_lines_grouped_by_instance_and_rpc_numbered_in_time(blind: SpanTable) -> None:
    objs = [json.loads(line) for line in blind_lines(blind)]
    groups = [(o["service"], o["instance"]) for o in objs]
    # one contiguous run per (service, instance), sorted by start within it
    runs = [g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g]
    assert len(runs) == len(set(runs))
    for i in range(1, len(objs)):
        if groups[i] == groups[i - 1]:
            assert objs[i]["start_ns"] >= objs[i - 1]["start_ns"]
    by_rpc: dict[int, list[dict]] = {}
    for o in objs:
        if o["rpc"] is not None:
            by_rpc.setdefault(o["rpc"], []).append(o)
    assert sorted(by_rpc) == list(range(len(by_rpc)))
    assert all(sorted(x["kind"] for x in v) == ["client", "server"] for v in by_rpc.values())
    first = [min(x["start_ns"] for x in by_rpc[n]) for n in sorted(by_rpc)]
    assert first == sorted(first)


def test_detected_and_read_through_read_spans(blind: SpanTable, tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    write_blind(path, blind)
    assert detect_format(path) == "blind"
    t = read_spans(path)
    assert len(t) == len(blind)
    assert int((t.link != NONE).sum()) == int((blind.link != NONE).sum())


# --------------------------------------------------------------------------------------------
# Errors

SERVER_LINE = {
    "service": "cart",
    "instance": "cart-0",
    "endpoint": "Get",
    "kind": "server",
    "start_ns": 2_000,
    "end_ns": 3_000,
    "peer": "frontend",
    "rpc": 5,
    "thread": None,
}
CLIENT_LINE = {
    "service": "frontend",
    "instance": "fe-0",
    "endpoint": "Get",
    "kind": "client",
    "start_ns": 1_000,
    "end_ns": 4_000,
    "peer": "cart",
    "rpc": 5,
    "thread": 3,
}


def write_lines(tmp_path: Path, lines: list, name: str = "bad.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return p


def blind_error(path: Path) -> str:
    with pytest.raises(InputError) as e:
        read_blind(path)
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_hand_written_pair(tmp_path: Path) -> None:
    t = read_blind(write_lines(tmp_path, [CLIENT_LINE, "", SERVER_LINE], name="ok.jsonl"))
    assert len(t) == 2
    assert t.link.tolist() == [1, 0]
    assert t.record.tolist() == [1, 3]
    assert t.thread.tolist() == [3, NONE]


def test_malformed_line(tmp_path: Path) -> None:
    msg = blind_error(write_lines(tmp_path, [CLIENT_LINE, '{"service": "cart", "kind": ']))
    assert "line 2" in msg and "malformed JSON" in msg


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(("\n".join([json.dumps(CLIENT_LINE)] * 50)).encode())
    p = tmp_path / "cut.jsonl.gz"
    p.write_bytes(data[:-12])
    assert "gzip" in blind_error(p)


def test_bad_kind(tmp_path: Path) -> None:
    msg = blind_error(write_lines(tmp_path, [CLIENT_LINE, {**SERVER_LINE, "kind": "internal"}]))
    assert "line 2" in msg and "kind" in msg


def test_missing_field(tmp_path: Path) -> None:
    line = dict(CLIENT_LINE)
    del line["start_ns"]
    msg = blind_error(write_lines(tmp_path, [SERVER_LINE, line]))
    assert "line 2" in msg and "'start_ns'" in msg


def test_rpc_shared_by_two_client_spans(tmp_path: Path) -> None:
    other = {**CLIENT_LINE, "instance": "fe-1", "start_ns": 1_500}
    msg = blind_error(write_lines(tmp_path, [CLIENT_LINE, SERVER_LINE, other]))
    assert "rpc 5" in msg and "line 3" in msg


def test_rpc_shared_by_two_client_spans_only(tmp_path: Path) -> None:
    other = {**CLIENT_LINE, "instance": "fe-1"}
    msg = blind_error(write_lines(tmp_path, [{**SERVER_LINE, "rpc": 1}, CLIENT_LINE, other]))
    assert "rpc 5" in msg and ("line 2" in msg or "line 3" in msg)


def test_rpc_within_one_instance(tmp_path: Path) -> None:
    server = {**SERVER_LINE, "service": "frontend", "instance": "fe-0"}
    msg = blind_error(write_lines(tmp_path, [CLIENT_LINE, server]))
    assert "rpc 5" in msg and "same instance" in msg


# --------------------------------------------------------------------------------------------
# Reading chunk by chunk (a stream for the online mode)


@pytest.mark.parametrize("name", ["b.jsonl", "b.jsonl.gz"])
def test_chunks_are_the_file_read_whole(blind: SpanTable, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    write_blind(path, blind, in_end_order=True)
    whole = read_blind(path)
    chunks = list(read_blind_chunks(path, 7))
    assert [len(c) for c in chunks[:-1]] == [7] * (len(chunks) - 1)
    assert sum(len(c) for c in chunks) == len(whole)
    pos = 0
    for c in chunks:
        assert len(c.strings) <= 4 * len(c) + 1  # its own strings only
        for r in range(len(c)):
            w = pos + r
            assert c.record[r] == whole.record[w] == w + 1
            for col in ("service", "instance", "endpoint", "peer"):
                assert c.name(col, r) == whole.name(col, w)
            assert (c.kind[r], c.start[r], c.end[r], c.thread[r]) == (
                whole.kind[w],
                whole.start[w],
                whole.end[w],
                whole.thread[w],
            )
            partner = int(whole.link[w])
            if partner == NONE:
                assert c.link[r] == NONE
            elif partner > w:
                assert c.link[r] == LATER
            else:
                assert c.link[r] == partner
        pos += len(c)


def test_end_order_is_stream_order(blind: SpanTable, tmp_path: Path) -> None:
    write_blind(tmp_path / "s.jsonl", blind, in_end_order=True)
    write_blind(tmp_path / "g.jsonl", blind)
    assert in_stream_order(tmp_path / "s.jsonl")
    assert not in_stream_order(tmp_path / "g.jsonl")
    assert not in_stream_order(write_lines(tmp_path, [{**CLIENT_LINE, "peer": None}]))
    assert not in_stream_order(write_lines(tmp_path, [CLIENT_LINE, "{"], name="bad.jsonl"))


def test_later_side_gets_the_earlier_sides_service_as_peer(tmp_path: Path) -> None:
    path = write_lines(tmp_path, [SERVER_LINE, {**CLIENT_LINE, "peer": None}])
    (chunk,) = read_blind_chunks(path)
    assert chunk.link.tolist() == [LATER, 0]
    assert chunk.name("peer", 1) == "cart"


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        ([CLIENT_LINE, CLIENT_LINE], ("line 2", "rpc 5", "one server span")),
        (
            [CLIENT_LINE, {**SERVER_LINE, "service": "frontend", "instance": "fe-0"}],
            ("line 2", "same instance"),
        ),
        ([SERVER_LINE, '{"kind": '], ("line 2", "malformed JSON")),
        ([SERVER_LINE, {**CLIENT_LINE, "kind": "internal"}], ("line 2", "kind")),
    ],
)
def test_bad_records_name_file_and_line(tmp_path: Path, lines: list, words: tuple) -> None:
    path = write_lines(tmp_path, lines)
    with pytest.raises(InputError) as e:
        list(read_blind_chunks(path))
    assert str(path) in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_truncated_gzip_stream(tmp_path: Path) -> None:
    data = gzip.compress(("\n".join([json.dumps(SERVER_LINE)] * 500)).encode())
    p = tmp_path / "cut.jsonl.gz"
    p.write_bytes(data[:-12])
    with pytest.raises(InputError, match="gzip"):
        list(read_blind_chunks(p))

"""Zipkin v2 JSON: every field read, shared spans split, documents written, errors located."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tacit.errors import InputError
from tacit.formats.zipkin import read_zipkin, write_zipkin, zipkin_document
from tacit.model.spans import CLIENT, INTERNAL, NONE, SERVER, UNKNOWN, SpanTable

TS = 1_661_140_374_351_773  # µs
TRACE = "80a551987167911b"


def span(sid: str, service: str, **fields) -> dict:
    return {
        "traceId": TRACE,
        "id": sid,
        "name": f"op-{sid}",
        "timestamp": TS,
        "duration": 100,
        "localEndpoint": {"serviceName": service},
        **fields,
    }


def shop_trace() -> list[dict]:
    """frontend calls cart, whose server side shares the client's id; cart works locally and
    sends a message that mail consumes."""
    return [
        span(
            "a1",
            "frontend",
            kind="SERVER",
            localEndpoint={"serviceName": "frontend", "ipv4": "10.0.0.1", "port": 8080},
            tags={"thread.id": "7"},
        ),
        span(
            "a2",
            "frontend",
            parentId="a1",
            kind="CLIENT",
            timestamp=TS + 10,
            duration=50,
            remoteEndpoint={"serviceName": "cart"},
        ),
        span(
            "a2",
            "cart",
            parentId="a1",
            kind="SERVER",
            shared=True,
            timestamp=TS + 12,
            duration=40,
            localEndpoint={"serviceName": "cart", "ipv6": "fe80::2"},
        ),
        span(
            "a3",
            "cart",
            parentId="a2",
            kind="PRODUCER",
            timestamp=TS + 15,
            duration=5,
            localEndpoint={"serviceName": "cart", "ipv6": "fe80::2", "port": 9},
        ),
        span(
            "a4",
            "cart",
            parentId="a2",
            timestamp=TS + 21,
            duration=3,
            tags={"lc": "cache", "hostname": "cart-7d9f8c6b5d-x2x4z"},
        ),
        span("a5", "mail", parentId="a3", kind="CONSUMER", timestamp=TS + 30, duration=0),
        span("a6", "mail", parentId="a5", timestamp=TS + 31, duration=1),
    ]


def write(tmp_path: Path, doc: object, name: str = "spans.json") -> Path:
    path = tmp_path / name
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


def by_id(t: SpanTable) -> dict[str, int]:
    return {t.name("span_id", row): row for row in range(len(t))}


@pytest.mark.parametrize("name", ["spans.json", "spans.json.gz"])
def test_every_field_is_read(tmp_path: Path, name: str) -> None:
    t = read_zipkin(write(tmp_path, shop_trace(), name))
    rows = by_id(t)
    assert {k: int(t.kind[r]) for k, r in rows.items()} == {
        "a1": SERVER,
        "a2": CLIENT,
        "a2:server": SERVER,  # the shared server side has an id of its own
        "a3": CLIENT,  # PRODUCER
        "a4": INTERNAL,  # no kind, "lc" tag
        "a5": SERVER,  # CONSUMER
        "a6": UNKNOWN,  # no kind
    }
    a1, a2, a2s, a3, a4, a5, a6 = rows.values()
    assert t.name("service", a2s) == "cart" and t.name("endpoint", a2s) == "op-a2"
    assert t.name("instance", a1) == "10.0.0.1:8080"
    assert t.name("instance", a2s) == "fe80::2"
    assert t.name("instance", a3) == "[fe80::2]:9"
    assert t.name("instance", a4) == "cart-7d9f8c6b5d-x2x4z"  # hostname tag: no address
    assert t.name("instance", a5) == "mail"  # neither: the service
    assert t.name("peer", a2) == "cart" and t.peer[a1] == NONE
    assert int(t.thread[a1]) == 7 and t.thread[a2] == NONE
    assert int(t.start[a2]) == (TS + 10) * 1000 and int(t.end[a2]) == (TS + 60) * 1000
    assert t.start.dtype.name == "int64"
    assert int(t.end[a5]) == int(t.start[a5])
    assert t.name("trace", a1) == TRACE
    assert [int(t.record[r]) for r in (a1, a2, a2s)] == [1, 2, 3]
    # the shared server side is the client's child, and the server's work hangs off it
    assert int(t.parent[a1]) == NONE
    assert int(t.parent[a2]) == a1
    assert int(t.parent[a2s]) == a2
    assert int(t.parent[a3]) == a2s and int(t.parent[a4]) == a2s
    assert int(t.parent[a5]) == a3 and int(t.parent[a6]) == a5


def test_server_reusing_a_client_id_without_shared_flag_is_split(tmp_path: Path) -> None:
    doc = [
        span("c1", "web", kind="CLIENT"),
        span("c1", "api", kind="SERVER", timestamp=TS + 1, duration=10),
        span("c2", "api", parentId="c1", kind="CLIENT", timestamp=TS + 2, duration=5),
    ]
    t = read_zipkin(write(tmp_path, doc))
    rows = by_id(t)
    assert int(t.parent[rows["c1:server"]]) == rows["c1"]
    assert int(t.parent[rows["c2"]]) == rows["c1:server"]


def test_shared_server_without_its_client_is_a_root(tmp_path: Path) -> None:
    t = read_zipkin(write(tmp_path, [span("d1", "api", kind="SERVER", shared=True)]))
    assert t.name("span_id", 0) == "d1:server" and int(t.parent[0]) == NONE


def test_query_api_list_of_traces(tmp_path: Path) -> None:
    doc = [shop_trace()[:2], [span("e1", "web", traceId="ffff")]]
    t = read_zipkin(write(tmp_path, doc))
    assert len(t) == 3 and len(set(t.trace.tolist())) == 2


def test_written_document_follows_the_model(tmp_path: Path) -> None:
    t = read_zipkin(write(tmp_path, shop_trace()))
    rows = by_id(t)
    doc = zipkin_document(t, tags={rows["a1"]: {"error": True, "http.status_code": 500}})
    out = {(z["localEndpoint"]["serviceName"], z["name"], z.get("kind")): z for z in doc}
    client = out["frontend", "op-a2", "CLIENT"]
    server = out["cart", "op-a2", "SERVER"]
    root = out["frontend", "op-a1", "SERVER"]
    assert server["parentId"] == client["id"] != server["id"]  # ":server" is not a Zipkin id
    assert all(len(z["id"]) == 16 and len(z["traceId"]) == 32 for z in doc)
    assert root["localEndpoint"] == {"serviceName": "frontend", "ipv4": "10.0.0.1", "port": 8080}
    assert root["tags"] == {"thread.id": "7", "error": "true", "http.status_code": "500"}
    assert "parentId" not in root
    assert client["remoteEndpoint"] == {"serviceName": "cart"}
    assert out["cart", "op-a3", "CLIENT"]["localEndpoint"]["ipv6"] == "fe80::2"
    local = out["cart", "op-a4", None]
    assert local["tags"] == {"lc": "cart", "hostname": "cart-7d9f8c6b5d-x2x4z"}
    assert out["mail", "op-a6", None].get("tags") is None  # unknown kind: no kind, no lc
    assert out["mail", "op-a5", "SERVER"]["duration"] == 1  # rounded up, as the model asks


def test_write_read_keeps_shared_structure(tmp_path: Path) -> None:
    first = read_zipkin(write(tmp_path, shop_trace()))
    write_zipkin(tmp_path / "again.json.gz", first)
    again = read_zipkin(tmp_path / "again.json.gz")

    def edges(t: SpanTable) -> set:
        def name(r: int) -> tuple:
            return (t.name("service", r), t.name("endpoint", r), int(t.kind[r]))

        return {
            (name(r), name(int(t.parent[r])) if t.parent[r] != NONE else None)
            for r in range(len(t))
        }

    assert edges(again) == edges(first)


def error_of(tmp_path: Path, doc: object) -> str:
    path = write(tmp_path, doc)
    with pytest.raises(InputError) as e:
        read_zipkin(path)
    assert str(e.value).startswith(str(path))
    return str(e.value)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"timestamp": None}, "missing field 'timestamp'"),
        ({"localEndpoint": {}}, "missing field 'serviceName'"),
        ({"localEndpoint": None}, "missing field 'localEndpoint'"),
        ({"timestamp": "soon"}, "field 'timestamp' must be an integer, got 'soon'"),
        ({"duration": 1.5}, "field 'duration' must be int or str, got float"),
        ({"kind": "SIDEWAYS"}, "unknown kind 'SIDEWAYS'"),
        ({"tags": ["x"]}, "field 'tags' must be dict, got list"),
        ({"shared": "yes"}, "field 'shared' must be bool, got str"),
        ({"duration": -5}, "negative duration -5"),
    ],
)
def test_bad_span_names_file_and_record(tmp_path: Path, bad: dict, message: str) -> None:
    doc = [span("f1", "web"), span("f2", "web", **bad)]
    text = error_of(tmp_path, doc)
    assert f"record 2 (trace {TRACE} span f2): {message}" in text


def test_span_that_is_not_an_object(tmp_path: Path) -> None:
    assert "record 1: span must be an object, got str" in error_of(tmp_path, ["oops"])


def test_document_that_is_not_a_list(tmp_path: Path) -> None:
    assert "not a Zipkin v2 document" in error_of(tmp_path, {"traceId": "x"})


def test_duplicate_ids_are_reported(tmp_path: Path) -> None:
    text = error_of(tmp_path, [span("g1", "web"), span("g1", "web", kind="CLIENT")])
    assert f"duplicate span id g1 in trace {TRACE}" in text

"""Spans from sidecar access logs (Envoy's default format, Istio's TEXT and JSON): direction,
coarse times, RPCs paired by request id, addresses and time, checked against the truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent_logs import MS, T0, sidecar_entries, truth, write_sidecar_logs
from tacit.errors import InputError
from tacit.formats.capture_spans import ServiceMap
from tacit.formats.envoy_access_log import (
    NO_HTTP,
    PROXY_LINES,
    TOLERANCE_NS,
    read_envoy_logs,
)
from tacit.formats.rpc_pairing import NOTHING_OPPOSITE, PairingParams
from tacit.model.spans import CLIENT, SERVER, SpanTable

N, GAP_MS = 40, 2.0
ISTIO_INBOUND = (
    '[2020-11-25T21:26:18.409Z] "GET /status/418?x=1 HTTP/1.1" 418 - via_upstream - "-" 0 135 '
    '4 3 "-" "curl/7.73.0-DEV" "84961386-6d84-929d-98bd-c5aee93b5c88" "httpbin:8000" '
    '"10.44.1.27:80" inbound|80|| 127.0.0.6:41000 10.44.1.27:80 10.44.1.23:37652 '
    "outbound_.8000_._.httpbin.foo.svc.cluster.local default"
)
ISTIO_TEXT = (
    '[2020-11-25T21:26:18.409Z] "GET /status/418?x=1 HTTP/1.1" 418 - via_upstream - "-" 0 135 '
    '4 4 "-" "curl/7.73.0-DEV" "84961386-6d84-929d-98bd-c5aee93b5c88" "httpbin:8000" '
    '"10.44.1.27:80" outbound|8000||httpbin.foo.svc.cluster.local 10.44.1.23:37652 '
    "10.0.45.184:8000 10.44.1.23:46520 - default"
)


def true_pairs() -> set[tuple[str, int, int]]:
    """(callee, client start, server start) of every RPC, times as a sidecar logs them
    (truncated to the millisecond)."""
    calls = truth(N, GAP_MS)
    server = {(c.request, c.role): c.start for c in calls if c.kind == "server"}
    return {
        (c.role, c.start // MS * MS, server[c.request, c.role] // MS * MS)
        for c in calls
        if c.kind == "client" and (c.request, c.role) in server
    }


def found_pairs(spans: SpanTable) -> set[tuple[str, int, int]]:
    rows = np.flatnonzero((spans.kind == CLIENT) & (spans.link >= 0))
    assert (spans.kind[spans.link[rows]] == SERVER).all()
    callee = [spans.name("service", int(spans.link[r])) for r in rows]
    starts = spans.start[rows].tolist(), spans.start[spans.link[rows]].tolist()
    return set(zip(callee, *starts, strict=True))


@pytest.mark.parametrize("fmt", ["envoy", "istio-json"])
def test_sidecars_rpcs_pair_as_the_truth_has_them(tmp_path: Path, fmt: str) -> None:
    write_sidecar_logs(tmp_path, truth(N, GAP_MS), fmt)
    got = read_envoy_logs(tmp_path)
    assert found_pairs(got.spans) == true_pairs()
    own = {PROXY_LINES: 1} if fmt == "envoy" else {}
    assert got.accounting == {
        "lines_read": 6 * N + sum(own.values()),
        **own,
        NO_HTTP: N,  # catalog's TCP connections to Redis
        "client_spans": 2 * N,
        "server_spans": 3 * N,
        "rpcs_paired": 2 * N,
        # from the load generator: only the frontend's own calls share their request id
        f"server spans unpaired: {NOTHING_OPPOSITE}": N,
    }
    s = got.spans
    rows = {(s.name("service", r), s.name("endpoint", r), int(s.kind[r]), s.name("peer", r))
            for r in range(len(s))}  # fmt: skip
    assert rows == {
        ("frontend", "GET /home", SERVER, "10.0.0.9" if fmt != "envoy" else None),
        ("frontend", "POST /shop.Catalog/List", CLIENT, "catalog"),
        ("catalog", "POST /shop.Catalog/List", SERVER, "frontend"),
        ("frontend", "GET /cart", CLIENT, "cart"),
        ("cart", "GET /cart", SERVER, "frontend"),
    }
    # START_TIME to the millisecond, DURATION in whole milliseconds
    front = np.flatnonzero((s.kind == SERVER) & (s.service == s.strings.find("frontend")))[0]
    assert (int(s.start[front]) - T0, int(s.end[front]) - T0) == (0, 9 * MS)


def test_without_the_tolerance_rounded_ends_lose_pairs(tmp_path: Path) -> None:
    calls = truth(N, 2.3)  # request starts off the millisecond: rounding moves the ends
    write_sidecar_logs(tmp_path, calls, "istio-json")
    coarse = read_envoy_logs(tmp_path)
    strict = read_envoy_logs(tmp_path, params=PairingParams(0))
    assert coarse.accounting["rpcs_paired"] == 2 * N
    assert strict.accounting["rpcs_paired"] < 2 * N
    assert TOLERANCE_NS == MS


def test_istio_text_line_and_direction_by_cluster(tmp_path: Path) -> None:
    (tmp_path / "sleep.log").write_text(ISTIO_TEXT + "\n")
    (tmp_path / "httpbin.log").write_text(ISTIO_INBOUND + "\n")
    got = read_envoy_logs(tmp_path)
    s = got.spans
    assert got.accounting["rpcs_paired"] == 1
    by_kind = {int(s.kind[r]): r for r in range(len(s))}
    client, server = by_kind[CLIENT], by_kind[SERVER]
    assert s.name("service", client) == "sleep" and s.name("service", server) == "httpbin"
    assert s.name("endpoint", client) == "GET /status/418"
    start = 1606339578409 * MS
    assert (int(s.start[client]), int(s.end[client])) == (start, start + 4 * MS)


def test_addresses_keep_apart_the_calls_of_one_propagated_id(tmp_path: Path) -> None:
    # Two calls from two frontends with the same id at the same millisecond: only the
    # addresses tell which server span answers which (the first logged answers the second).
    entries = sidecar_entries(truth(1, GAP_MS))
    other = [
        e
        | {
            k: e[k].replace("10.0.0.1:", "10.0.0.5:")
            for k in ("upstream_local_address", "downstream_remote_address")
            if e.get(k)
        }
        for e in entries["frontend"]
    ]
    (tmp_path / "frontend.jsonl").write_text("\n".join(map(json.dumps, entries["frontend"])))
    (tmp_path / "frontend2.jsonl").write_text("\n".join(map(json.dumps, other)))
    remote = "downstream_remote_address"
    two = [e | {remote: e[remote].replace("10.0.0.1:", "10.0.0.5:")} for e in entries["catalog"]]
    (tmp_path / "catalog.jsonl").write_text("\n".join(map(json.dumps, two + entries["catalog"])))
    (tmp_path / "cart.jsonl").write_text("\n".join(map(json.dumps, entries["cart"])))
    s = read_envoy_logs(tmp_path).spans
    for r in np.flatnonzero((s.kind == CLIENT) & (s.peer == s.strings.find("catalog"))):
        assert s.link[r] >= 0
        record = int(s.record[s.link[r]])
        assert record == (3 if s.name("service", r) == "frontend" else 1)


def test_a_pod_list_names_the_service_of_a_pod_named_file(tmp_path: Path) -> None:
    write_sidecar_logs(tmp_path, truth(2, GAP_MS), "istio-json")
    (tmp_path / "cart.jsonl").rename(tmp_path / "cart-v1-5d8f.jsonl")
    pods = ServiceMap(addresses={"10.0.0.3": "cart"}, instances={"10.0.0.3": "cart-v1-5d8f"})
    s = read_envoy_logs(tmp_path, pods).spans
    rows = np.flatnonzero(s.instance == s.strings.find("cart-v1-5d8f"))
    assert len(rows) == 2 and {s.name("service", r) for r in rows} == {"cart"}
    s = read_envoy_logs(tmp_path).spans  # without the pod list: named after the file
    assert {s.name("service", r) for r in range(len(s))} == {"frontend", "catalog", "cart-v1-5d8f"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("GET / 200", "not an access log entry"),
        ('[2020-11-25T21:26:18.409Z] "GET / HTTP/1.1" 200', "got 3 fields"),
        (ISTIO_TEXT.replace("2020-11-25T", "yesterday "), "start_time is not an ISO 8601 time"),
        (ISTIO_TEXT.replace(" 4 4 ", " 4.5 4 "), "duration must be whole milliseconds"),
        ('{"start_time": "2020-11-25T21:26:18.409Z", "method": "GET"', "malformed JSON"),
        ('{"start_time": 5, "method": "GET", "path": "/", "duration": 1}', "not an ISO 8601"),
    ],
)  # fmt: skip
def test_a_bad_line_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "web.log"
    path.write_text(ISTIO_TEXT + "\n\n" + line + "\n")
    with pytest.raises(InputError, match=message) as e:
        read_envoy_logs(path)
    assert str(e.value).startswith(f"{path}: record line 3: ")
    assert "\n" not in str(e.value)


def test_a_file_without_entries_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_text("2023-11-14T22:13:20.000000Z\tinfo\tEnvoy proxy is ready\n")
    with pytest.raises(InputError, match=r"empty\.log: no access log entries"):
        read_envoy_logs(path)

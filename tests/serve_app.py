"""A running ``tacit serve`` fed by the OpenTelemetry SDK's exporter, for the service's tests."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import Message
from functools import cache
from pathlib import Path
from typing import Any

from tacit.model.spans import SpanTable
from tacit.reconstruct.callgraph import CallGraph, learn_callgraph
from tacit.reconstruct.online import NS, OnlineParams
from tacit.serve import ServeConfig, Service
from tacit.simulate import load_app, simulate

QUICK = OnlineParams(window_ns=NS, lookahead_ns=NS, max_request_ns=2 * NS, lateness_ns=NS // 10)
"""Windows short enough that a test's traces finish within seconds of the last span."""


@cache
def shop_callgraph() -> CallGraph:
    """The embedded shop app's call graph, learned from 200 test requests."""
    return learn_callgraph(simulate(load_app(), 5, n_requests=200, seed=1))


def shop_spans(seconds: float, rate: float = 100, seed: int = 2) -> SpanTable:
    """The shop app's spans (with ground truth) under ``rate`` requests/s, without thread ids,
    which the SDK's spans do not carry."""
    return simulate(load_app(), rate, duration_s=seconds, seed=seed, record_threads=False)


def config(tmp: Path, **changes: Any) -> ServeConfig:
    return ServeConfig(
        http="127.0.0.1:0",
        grpc="127.0.0.1:0",
        database=tmp / "tacit.duckdb",
        online=QUICK,
        idle_s=2.0,  # a sender stalled by a busy machine must not move the clock on
    ).updated(**changes)


@contextmanager
def running(tmp: Path, **changes: Any) -> Iterator[Service]:
    svc = Service(config(tmp, **changes), shop_callgraph()).start()
    try:
        yield svc
    finally:
        svc.stop()


def until(condition: Callable[[], object], timeout_s: float, poll_s: float = 0.1) -> bool:
    """Whether ``condition`` held within ``timeout_s``, looked at every ``poll_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def url(svc: Service, path: str) -> str:
    return f"http://127.0.0.1:{svc.http_port}{path}"


def get(svc: Service, path: str) -> tuple[int, bytes, Message]:
    """Status, body and headers (their names in any case) of a GET, errors included."""
    try:
        with urllib.request.urlopen(url(svc, path), timeout=30) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def get_json(svc: Service, path: str) -> Any:
    status, body, _ = get(svc, path)
    assert status == 200, body
    return json.loads(body)


def post(svc: Service, body: bytes, ctype: str, **headers: str) -> tuple[int, bytes, Message]:
    request = urllib.request.Request(
        url(svc, "/v1/traces"), data=body, headers={"Content-Type": ctype, **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers

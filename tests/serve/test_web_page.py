"""The web page of ``tacit serve`` in headless chromium draws what the service's API answers:
the traces a search finds, one waterfall row per span of a trace with each reconstructed link's
score and candidates and each unmapped call's reason, the dependency graph's edges and the
per-service confidence with its advice (TraceWeaver §6.3.2); the latency charts, Pirate's
estimates per server and epoch and RDA's mean ± std per interval, as the service receives
them."""

from __future__ import annotations

import base64
import json
import urllib.error
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from serve_app import config, shop_callgraph
from serve_latency import PIRATE, json_lines, pirate_capture, rda_records
from serve_page import browser, browser_missing, get_json, serving, shop
from tacit.model.spans import CLIENT, SERVER, SpanTable
from tacit.serve import Service

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))

SCREENSHOT = Path(__file__).resolve().parents[2] / "test-artifacts" / "serve-page.png"
SERVICE = "frontend"
LOOKBACK = "1h"
LIMIT = 1000
"""More than the traces of the stream: the search finds them all."""
UNKNOWN = "Purge"
WAIT_S = 30


def _unknown_calls(spans: SpanTable, n: int) -> None:
    """Rename ``n`` of frontend's calls to cache (both sides) to an operation the learned call
    graph never saw: the reconstruction leaves those calls unmapped and says why."""
    s = spans.strings
    calls = np.flatnonzero(
        (spans.kind == CLIENT)
        & (spans.service == s.code(SERVICE))
        & (spans.peer == s.code("cache"))
    )
    calls = calls[np.linspace(0, len(calls) - 1, n + 2).astype(int)[1:-1]]
    served = (spans.kind == SERVER) & np.isin(spans.parent, calls)
    spans.endpoint[calls] = spans.endpoint[served] = s.code(UNKNOWN)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Any:
    spans, callgraph = shop(3.0)
    _unknown_calls(spans, 3)
    with serving(spans, callgraph, tmp_path_factory.mktemp("serve") / "tacit.duckdb") as url:
        yield url


def _tags(span: dict) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span["tags"]}


def _parent(span: dict) -> str | None:
    refs = span["references"]
    return refs[0]["spanID"] if refs else None


def _depths(trace: dict) -> dict[str, int]:
    by_id = {s["spanID"]: s for s in trace["spans"]}

    def depth(s: dict) -> int:
        p = _parent(s)
        return 0 if p not in by_id else 1 + depth(by_id[p])

    return {i: depth(s) for i, s in by_id.items()}


def _root_name(trace: dict) -> str:
    ids = {s["spanID"] for s in trace["spans"]}
    root = min((s for s in trace["spans"] if _parent(s) not in ids), key=lambda s: s["startTime"])
    return f"{trace['processes'][root['processID']]['serviceName']} {root['operationName']}"


def _shown_percent(text: str) -> float:
    """The probability in "92% sure · 2 candidates" (or "—" for none)."""
    return float(text.split("%")[0]) / 100


def _trace_probability(trace: dict) -> float | None:
    """The ``tacit.trace_probability`` of the trace's root."""
    ids = {s["spanID"] for s in trace["spans"]}
    roots = [s for s in trace["spans"] if _parent(s) not in ids]
    found = [_tags(s)["tacit.trace_probability"] for s in roots]
    return found[0] if found else None


def test_page_draws_what_the_api_answers(base: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    with browser() as page:
        wait = WebDriverWait(page, WAIT_S)
        page.get(base + "/")
        rows_js = "return [...document.querySelectorAll(arguments[0])].map(arguments[1]);"

        def each(selector: str, fn: str) -> list:
            return page.execute_script(rows_js.replace("arguments[1]", fn), selector)

        # -- the form offers what the API knows ------------------------------------------------
        services = get_json(base, "/api/services")["data"]
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#service[data-loaded]"))
        assert each("#service option", "o => o.value") == services
        Select(page.find_element(By.ID, "service")).select_by_value(SERVICE)
        wait.until(
            lambda d: d.find_elements(By.CSS_SELECTOR, f'#operation[data-loaded="{SERVICE}"]')
        )
        operations = get_json(base, f"/api/services/{SERVICE}/operations")["data"]
        assert UNKNOWN in operations
        assert each("#operation option", "o => o.value") == ["", *operations]

        # -- a search lists the traces the API finds, in its order -----------------------------
        Select(page.find_element(By.ID, "lookback")).select_by_value(LOOKBACK)
        limit = page.find_element(By.ID, "limit")
        limit.clear()
        limit.send_keys(str(LIMIT))
        page.find_element(By.ID, "find").click()
        found = get_json(base, f"/api/traces?service={SERVICE}&lookback={LOOKBACK}&limit={LIMIT}")
        traces = found["data"]
        assert 100 < len(traces) < LIMIT
        wait.until(lambda d: d.execute_script("return document.body.dataset.tracesDrawn"))
        listed = each(
            "#trace-list tbody tr[data-trace-id]",
            "r => [r.dataset.traceId, +r.dataset.spans, r.cells[0].textContent,"
            " r.cells[5].textContent, r.dataset.probability, r.cells[4].textContent]",
        )
        assert [row[0] for row in listed] == [t["traceID"] for t in traces]
        assert page.find_element(By.ID, "result-summary").text == f"{len(traces)} traces"
        lowest_of: dict[str, float] = {}
        for (_, n_spans, name, lowest, probability, sure), trace in zip(
            listed, traces, strict=True
        ):
            assert n_spans == len(trace["spans"])
            assert name.startswith(_root_name(trace))
            p = _trace_probability(trace)
            assert p is not None  # every stored trace has its probability
            assert float(probability) == p
            assert _shown_percent(sure) == pytest.approx(p, abs=5e-3)
            scores = [_tags(s)["tacit.score"] for s in trace["spans"] if "tacit.score" in _tags(s)]
            if scores:
                lowest_of[trace["traceID"]] = min(scores)
                assert float(lowest) == pytest.approx(min(scores), abs=5e-3)
            else:
                assert lowest == "—"

        # Sorted by the lowest score on a click of its heading, traces without one last.
        page.find_element(By.CSS_SELECTOR, '#trace-list th[data-sort="minScore"]').click()
        doubtful_first = sorted(
            (t["traceID"] for t in traces), key=lambda i: lowest_of.get(i, float("inf"))
        )
        wait.until(
            lambda d: each("#trace-list tbody tr", "r => r.dataset.traceId") == doubtful_first
        )

        # -- a search for the traces at least 90% sure: the API's answer, only those -----------
        sure = page.find_element(By.ID, "min-probability")
        sure.send_keys("90")
        page.execute_script("delete document.body.dataset.tracesDrawn")
        page.find_element(By.ID, "find").click()
        wait.until(lambda d: d.execute_script("return document.body.dataset.tracesDrawn"))
        query = f"service={SERVICE}&lookback={LOOKBACK}&limit={LIMIT}&minProbability=0.9"
        kept = get_json(base, f"/api/traces?{query}")["data"]
        assert 0 < len(kept) < len(traces)  # the shop at its load has traces on both sides
        assert all(_trace_probability(t) >= 0.9 for t in kept)
        assert {t["traceID"] for t in kept} == {
            t["traceID"] for t in traces if _trace_probability(t) >= 0.9
        }
        listed_sure = each("#trace-list tbody tr[data-trace-id]", "r => r.dataset.traceId")
        assert listed_sure == [t["traceID"] for t in kept]
        assert "minProbability=0.9" in page.current_url
        sure.clear()
        page.execute_script("delete document.body.dataset.tracesDrawn")
        page.find_element(By.ID, "find").click()
        wait.until(lambda d: d.execute_script("return document.body.dataset.tracesDrawn"))

        # -- a trace with a contested link: its waterfall, scores and candidates ---------------
        def contested(trace: dict) -> dict | None:
            return next(
                (
                    s
                    for s in trace["spans"]
                    if len(json.loads(_tags(s).get("tacit.alternatives", "[]"))) > 1
                ),
                None,
            )

        trace = next(t for t in traces if contested(t) is not None)
        span = contested(trace)
        assert span is not None
        shown = _open(page, wait, trace["traceID"])
        api_trace = get_json(base, f"/api/traces/{trace['traceID']}")["data"][0]
        _check_waterfall(shown, api_trace)
        (mapped,) = (r for r in shown if r["id"] == span["spanID"])
        assert mapped["score"] == _tags(span)["tacit.score"]  # the mapped client call's score
        row = page.find_element(By.CSS_SELECTOR, f'.span-row[data-span-id="{span["spanID"]}"]')
        row.click()
        detail = f'.span-detail[data-span-id="{span["spanID"]}"]'
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"{detail} tr.alternative"))
        alternatives = json.loads(_tags(span)["tacit.alternatives"])
        shown_alternatives = each(
            f"{detail} tr.alternative",
            "r => [r.dataset.parentId, +r.dataset.score, +r.dataset.share]",
        )
        assert shown_alternatives == alternatives
        assert sum(p for _, _, p in alternatives) == pytest.approx(1, abs=1e-3)
        assert each(f"{detail} tr.chosen", "r => r.dataset.parentId") == [_parent(span)]

        # -- a trace headed by an unmapped call: the reason shows ------------------------------
        trace = next(t for t in traces if any("tacit.unmapped" in _tags(s) for s in t["spans"]))
        shown = _open(page, wait, trace["traceID"])
        _check_waterfall(shown, get_json(base, f"/api/traces/{trace['traceID']}")["data"][0])
        reasons = {
            s["spanID"]: _tags(s)["tacit.unmapped"]
            for s in trace["spans"]
            if "tacit.unmapped" in _tags(s)
        }
        assert {r["id"]: r["reason"] for r in shown if r["reason"]} == reasons
        assert all(r["reasonText"].endswith(reasons[r["id"]]) for r in shown if r["reason"])

        # -- the dependency graph has the API's edges ------------------------------------------
        links = get_json(base, "/api/dependencies?lookback=3600000")["data"]
        assert links
        wait.until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "#dependencies svg .edge")) == len(links)
        )
        edges = each(
            "#dependencies svg .edge",
            "g => [g.dataset.parent, g.dataset.child, +g.dataset.calls, g.textContent]",
        )
        assert sorted(e[:3] for e in edges) == sorted(
            [ln["parent"], ln["child"], ln["callCount"]] for ln in links
        )
        assert all(e[3].endswith(str(e[2])) for e in edges)  # the drawn call count
        assert sorted(each("#dependencies svg .node", "g => g.dataset.service")) == sorted(
            {ln["parent"] for ln in links} | {ln["child"] for ln in links}
        )

        # -- the confidence table and its advice -----------------------------------------------
        confidence = get_json(base, "/api/tacit/confidence")
        assert each("#confidence tbody tr[data-service]", "r => r.dataset.service")
        table = {
            s: float(c)
            for s, c in each(
                "#confidence tbody tr[data-service]",
                "r => [r.dataset.service, r.dataset.confidence]",
            )
        }
        assert table == {r["service"]: r["confidence"] for r in confidence["data"]}
        assert page.find_element(By.ID, "confidence-advice").text == confidence["advice"]

        # -- the call graph, given by the operator, and the calls it lacks ----------------------
        given = get_json(base, "/api/tacit/status")["callgraph"]
        source = page.find_element(By.ID, "callgraph-source").text
        assert given["count"] > 0 and given["calls_not_in_callgraph"] == 3  # the renamed calls
        assert source.startswith(
            f"Given by the operator: {given['count']} endpoints. 3 calls since it took effect "
            "match no entry of it"
        )
        assert not page.find_elements(By.CSS_SELECTOR, "#callgraph tbody tr")

        SCREENSHOT.parent.mkdir(exist_ok=True)
        size = page.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        whole = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = page.execute_cdp_cmd(
            "Page.captureScreenshot", {"captureBeyondViewport": True, "clip": whole}
        )
        SCREENSHOT.write_bytes(base64.b64decode(shot["data"]))
        print(f"screenshot of the page: {SCREENSHOT}")

        # -- a trace's own address opens its waterfall ----------------------------------------
        page.get(f"{base}/?trace={trace['traceID']}")
        wait.until(lambda d: trace["traceID"] in d.find_element(By.ID, "trace-header").text)
        _check_waterfall(_rows(page), trace)

        # -- a search the API refuses says why ------------------------------------------------
        page.find_element(By.ID, "min-duration").send_keys("soon")
        page.find_element(By.ID, "find").click()
        wait.until(lambda d: d.find_element(By.ID, "search-error").is_displayed())
        with pytest.raises(urllib.error.HTTPError) as refused:
            get_json(base, f"/api/traces?service={SERVICE}&minDuration=soon")
        assert refused.value.code == 400
        message = json.loads(refused.value.read())["errors"][0]["msg"]
        assert page.find_element(By.ID, "search-error").text == message


def _open(page: Any, wait: Any, trace_id: str) -> list[dict]:
    """Click the trace's row in the list; the waterfall's rows once it shows that trace."""
    from selenium.webdriver.common.by import By

    page.find_element(By.CSS_SELECTOR, f'#trace-list tr[data-trace-id="{trace_id}"]').click()
    wait.until(lambda d: trace_id in d.find_element(By.ID, "trace-header").text)
    return _rows(page)


def _rows(page: Any) -> list[dict]:
    """What the waterfall draws of each span."""
    return page.execute_script(
        """return [...document.querySelectorAll('#waterfall .span-row')].map(r => {
          const line = r.querySelector('.span-timeline').getBoundingClientRect();
          const bar = r.querySelector('.span-bar').getBoundingClientRect();
          const score = r.querySelector('.link-score');
          const unmapped = r.querySelector('.unmapped');
          return {id: r.dataset.spanId, depth: +r.dataset.depth, parent: r.dataset.parentId,
                  left: (bar.left - line.left) / line.width, width: bar.width / line.width,
                  px: 1 / line.width,
                  score: score ? +score.dataset.score : null,
                  probability: score ? +score.dataset.probability : null,
                  scoreText: score ? score.textContent : null,
                  reason: unmapped ? unmapped.dataset.reason : null,
                  reasonText: unmapped ? unmapped.textContent : null};
        });"""
    )


def _check_waterfall(shown: list[dict], trace: dict) -> None:
    """One row per span, each under its parent at the right depth, its bar where and as long
    as the span is in the trace's time, and each reconstructed link's score and probability."""
    spans = {s["spanID"]: s for s in trace["spans"]}
    assert sorted(r["id"] for r in shown) == sorted(spans)
    depths = _depths(trace)
    seen: set[str] = set()
    start = min(s["startTime"] for s in spans.values())
    total = max(s["startTime"] + s["duration"] for s in spans.values()) - start
    for r in shown:
        s = spans[r["id"]]
        assert r["depth"] == depths[r["id"]]
        assert r["parent"] == (_parent(s) or "")
        if r["depth"]:
            assert r["parent"] in seen  # drawn below its parent
        seen.add(r["id"])
        assert r["left"] == pytest.approx((s["startTime"] - start) / total, abs=r["px"])
        assert r["width"] == pytest.approx(s["duration"] / total, abs=2 * r["px"])
        score = _tags(s).get("tacit.score")
        assert r["score"] == score
        if score is not None:
            p = _tags(s)["tacit.probability"]
            assert r["probability"] == p
            assert _shown_percent(r["scoreText"]) == pytest.approx(p, abs=5e-3)


@pytest.fixture(scope="module")
def latency(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A service with a Pirate capture and an RDA results file that has the first intervals."""
    tmp = tmp_path_factory.mktemp("latency")
    pcap, _ = pirate_capture(tmp)
    receiver, _ = rda_records(tmp)
    results = tmp / "receiver.jsonl"
    results.write_text(json_lines(receiver[:FIRST_INTERVALS]))
    cfg = config(tmp, grpc="", pirate_pcap=pcap, pirate=PIRATE, rda_results=(results,))
    service = Service(cfg, shop_callgraph()).start()
    try:
        yield f"http://127.0.0.1:{service.http_port}", results, receiver[FIRST_INTERVALS:]
    finally:
        service.stop()


FIRST_INTERVALS = 4


def _scaled(points: list[dict], scale: dict[str, str], t: str, v: str) -> None:
    """Each point where the chart's scales put its time ``t`` (ms) and value ``v`` (ns)."""
    t0, t1, v0, v1, x0, x1, y0, y1 = (
        float(scale[k]) for k in ("t0", "t1", "v0", "v1", "x0", "x1", "y0", "y1")
    )
    for p in points:
        assert p["cx"] == pytest.approx(x0 + (p[t] - t0) / (t1 - t0) * (x1 - x0), abs=1e-6)
        assert p["cy"] == pytest.approx(y0 - (p[v] - v0) / (v1 - v0) * (y0 - y1), abs=1e-6)
        assert y1 <= p["cy"] <= y0 and x0 <= p["cx"] <= x1


def test_latency_charts_draw_what_the_api_answers(latency: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    base, results, later = latency
    points_js = """return [...document.querySelectorAll(arguments[0] + ' svg .point')].map(c =>
        Object.assign({cx: +c.getAttribute('cx'), cy: +c.getAttribute('cy')}, c.dataset));"""
    scale_js = "return {...document.querySelector(arguments[0] + ' svg').dataset};"
    with browser() as page:
        wait = WebDriverWait(page, WAIT_S)
        page.get(base + "/")

        # -- Pirate: one point per server and epoch, the API's series ---------------------------
        wait.until(lambda d: get_json(base, "/api/tacit/status")["pirate"][0]["finished"])
        answer = get_json(base, "/api/tacit/latency/response")
        expected = [
            [s["server"], round(p["epoch_start_ns"] / 1e6), p["latency_ns"], p["samples"]]
            for s in answer["series"]
            for p in s["points"]
        ]
        assert len(expected) > 4

        def drawn(chart: str) -> list[dict]:
            return page.execute_script(points_js, chart)

        wait.until(lambda d: len(drawn("#response-latency")) == len(expected))
        shown = drawn("#response-latency")
        assert [
            [p["server"], int(p["epochMs"]), int(p["latencyNs"]), int(p["samples"])] for p in shown
        ] == expected
        for p in shown:
            p["t"], p["v"] = float(p["epochMs"]), float(p["latencyNs"])
        _scaled(shown, page.execute_script(scale_js, "#response-latency"), "t", "v")

        # -- RDA: mean ± std per interval, and the intervals that arrive later ------------------
        def check_oneway() -> None:
            rows = get_json(base, "/api/tacit/latency/oneway")["data"]
            shown = drawn("#oneway-latency")
            assert [
                [p["source"], p["role"], int(p["interval"]), float(p["meanNs"]), float(p["stdNs"])]
                for p in shown
            ] == [[r["source"], r["role"], r["interval"], r["mean_ns"], r["std_ns"]] for r in rows]
            for p in shown:
                p["t"], p["v"] = p["interval"], float(p["meanNs"])
            scale = page.execute_script(scale_js, "#oneway-latency")
            starts = {r["interval"]: round(r["start_ns"] / 1e6) for r in rows}
            for p in shown:
                p["t"] = starts[int(p["interval"])]
            _scaled(shown, scale, "t", "v")
            bars = page.execute_script(
                "return [...document.querySelectorAll('#oneway-latency svg .std')].map(l =>"
                " [+l.getAttribute('y1'), +l.getAttribute('y2')]);"
            )
            y0, y1, v1 = (float(scale[k]) for k in ("y0", "y1", "v1"))
            assert bars == [
                pytest.approx(
                    [y0 - max(0, r["mean_ns"] - r["std_ns"]) / v1 * (y0 - y1),
                     y0 - (r["mean_ns"] + r["std_ns"]) / v1 * (y0 - y1)],
                    abs=1e-6,
                )
                for r in rows
            ]  # fmt: skip

        wait.until(lambda d: len(drawn("#oneway-latency")) == FIRST_INTERVALS)
        check_oneway()
        with results.open("a") as f:
            f.write(json_lines(later))
        # No reload: the page refreshes its charts by itself.
        total = FIRST_INTERVALS + len(later) - 1  # the last line is the agent's summary
        wait.until(lambda d: len(drawn("#oneway-latency")) == total)
        check_oneway()

        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.find_element("id", "latency-panel").screenshot(
            str(SCREENSHOT.with_name("serve-latency.png"))
        )


def test_the_page_shows_the_call_graph_the_service_learns(tmp_path: Path) -> None:
    """A service started without a call graph: the page lists every endpoint seen, with the
    requests known of each and whether it is in use, as the status says."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from serve_app import shop_spans
    from tacit.experiment.otlp_load import lost_context, send_spans

    svc = Service(config(tmp_path, grpc="", idle_s=3600))
    svc.reconstructor.learn_every_s = 0.5
    svc.start()
    try:
        base = f"http://127.0.0.1:{svc.http_port}"
        spans = lost_context(shop_spans(6, rate=20))
        assert not send_spans(spans, f"{base}/v1/traces").failed
        svc.reconstructor.idle_s = 1.0
        assert svc.wait_idle(60)
        # a pass over every span stored, after which the status stays as it is
        svc.reconstructor.learn_every_s = 3600
        served = int((spans.kind == SERVER).sum())
        WebDriverWait(None, WAIT_S).until(
            lambda _: sum(svc.learner.support.seen.values()) == served
        )
        status = get_json(base, "/api/tacit/status")["callgraph"]
        with browser() as page:
            page.get(base + "/")
            rows = "#callgraph tbody tr[data-endpoint]"
            WebDriverWait(page, WAIT_S).until(lambda d: d.find_elements(By.CSS_SELECTOR, rows))
            drawn = page.execute_script(
                "return [...document.querySelectorAll(arguments[0])].map(r =>"
                " [r.dataset.endpoint, r.dataset.learned === 'true', r.cells[1].textContent]);",
                rows,
            )
            source = page.find_element(By.ID, "callgraph-source").text
    finally:
        svc.stop()
    endpoints = status["endpoints"]
    assert sorted(name for name, _, _ in drawn) == sorted(endpoints)
    assert all(learned == endpoints[name]["learned"] for name, learned, _ in drawn)
    assert all(int(seen) == endpoints[name]["seen"] for name, _, seen in drawn)
    assert source.startswith(f"Learned from the stored spans: {status['count']} of ")

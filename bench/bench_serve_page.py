"""Benchmark: how soon the web page of ``tacit serve`` shows a search's 1,000 traces.

A service (on a free port, with a temporary DuckDB file) receives 12 seconds of the simulated
shop app at 100 requests per second through the OpenTelemetry SDK's OTLP/HTTP exporter, about
1,200 traces, and reconstructs them. Headless chromium then opens the page at an address that
searches frontend's traces with ``limit=1000``, :data:`LOADS` times, each a fresh navigation.
The page marks ``trace-list-drawn`` on its performance timeline once the frame holding the
drawn list has been painted; its time since the navigation started, measured in the page, is
the first-render time, of which the search answer's own time (its resource timing, from the
request's start to its last byte) is given apart. Prints one JSON object with the per-load
times and their medians against the target of :data:`TARGET_MS`. Without chromium and its
chromedriver it prints why it skipped.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the page's helpers

from serve_page import browser, browser_missing, get_json, serving, shop

SECONDS = 12.0
LIMIT = 1000
LOADS = 5
TARGET_MS = 1000.0
SEARCH = f"service=frontend&lookback=1h&limit={LIMIT}"
_TIMES = """
const drawn = performance.getEntriesByName("trace-list-drawn")[0];
const search = performance.getEntriesByType("resource").find(r => r.name.includes("/api/traces?"));
return {drawn_ms: drawn.startTime, search_ms: search.responseEnd - search.startTime,
        rows: document.querySelectorAll("#trace-list tbody tr[data-trace-id]").length};
"""


def measure() -> dict:
    from selenium.webdriver.support.ui import WebDriverWait

    spans, callgraph = shop(SECONDS)
    with (
        tempfile.TemporaryDirectory(prefix="tacit-bench-") as tmp,
        serving(spans, callgraph, Path(tmp) / "tacit.duckdb") as base,
    ):
        stored = get_json(base, "/api/tacit/status")["stored"]
        found = len(get_json(base, f"/api/traces?{SEARCH}")["data"])
        loads = []
        with browser() as page:
            for _ in range(LOADS):
                page.get("about:blank")
                page.get(f"{base}/?{SEARCH}")
                WebDriverWait(page, 60).until(
                    lambda d: d.execute_script("return document.body.dataset.tracesDrawn")
                )
                loads.append(page.execute_script(_TIMES))
    if any(load["rows"] != found for load in loads):
        raise SystemExit(f"the page listed {[x['rows'] for x in loads]} traces, the API {found}")
    drawn = [round(x["drawn_ms"], 1) for x in loads]
    median = statistics.median(drawn)
    return {
        "spans": len(spans),
        "traces_stored": stored["traces"],
        "traces_listed": found,
        "first_render_ms": drawn,
        "search_answer_ms": [round(x["search_ms"], 1) for x in loads],
        "median_first_render_ms": median,
        "median_search_answer_ms": statistics.median(round(x["search_ms"], 1) for x in loads),
        "target_ms": TARGET_MS,
        "meets_target": median < TARGET_MS,
    }


def main() -> None:
    missing = browser_missing()
    out = {"skipped": missing} if missing else measure()
    print(json.dumps({"serve_page": out}))


if __name__ == "__main__":
    main()

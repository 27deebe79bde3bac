"""The web page of ``tacit serve`` in a real browser, for its test and its benchmark: Debian's
``chromium`` driven through its ``chromedriver`` by selenium, and a service on a free port
holding simulated spans of the shop app, sent by the OpenTelemetry SDK's own exporter."""

from __future__ import annotations

import json
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from serve_app import config, shop_callgraph, shop_spans
from tacit.experiment.otlp_load import lost_context, send_spans
from tacit.model.spans import SpanTable
from tacit.reconstruct.callgraph import CallGraph
from tacit.serve import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
BROWSER_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
)


def browser_missing() -> str | None:
    """Why the browser cannot run here, or None."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if not missing:
        return None
    return f"{' and '.join(missing)} absent (apt-get install chromium chromium-driver)"


@contextmanager
def browser() -> Iterator[Any]:
    """A headless chromium with a fresh profile, quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in BROWSER_ARGS:
        options.add_argument(arg)
    with tempfile.TemporaryDirectory(prefix="tacit-chromium-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(options=options, service=DriverService(str(CHROMEDRIVER)))
        try:
            yield driver
        finally:
            driver.quit()


def shop(duration_s: float, seed: int = 2) -> tuple[SpanTable, CallGraph]:
    """``duration_s`` seconds of the shop app at 100 requests/s, every call without its
    parent so that the service reconstructs each (and the page has evidence to show), and its
    call graph."""
    return lost_context(shop_spans(duration_s, seed=seed)), shop_callgraph()


@contextmanager
def serving(spans: SpanTable, callgraph: CallGraph, database: Path) -> Iterator[str]:
    """A service on a free port that has received and reconstructed ``spans``; yields its base
    address (``http://127.0.0.1:PORT``)."""
    service = Service(config(database.parent, database=database, grpc=""), callgraph).start()
    try:
        base = f"http://127.0.0.1:{service.http_port}"
        sent = send_spans(spans, f"{base}/v1/traces")
        if sent.failed:
            raise RuntimeError(f"the service refused {sent.failed} of {len(spans)} spans")
        if not service.wait_idle(120):
            raise RuntimeError("the service did not reconstruct the spans within 120 s")
        yield base
    finally:
        service.stop()


def get_json(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path, timeout=30) as answer:
        return json.loads(answer.read())

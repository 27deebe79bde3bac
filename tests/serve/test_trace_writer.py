"""Finished traces stored behind the reconstruction (:mod:`tacit.serve.trace_writer`): the
next requests are reconstructed while a group is written, every group is stored in order, and
a write that does not end is reported as a stall."""

from __future__ import annotations

import threading
import time

from serve_app import get, get_json, running, shop_spans, until
from tacit.experiment.otlp_load import encoded_requests, post_requests


def test_the_next_requests_are_reconstructed_while_a_write_is_held(tmp_path):
    """While a write of finished traces is held, the reconstruction takes the next requests
    (it waits only once a second group waits to be written); readiness says the write has not
    moved on; once it is let go, every span is stored once and the store commits the last
    low-water mark."""
    spans = shop_spans(6)
    requests = encoded_requests(spans)
    with running(tmp_path) as svc:
        svc.reconstructor.stall_s = 0.5
        write = svc.store.write_finished
        writing, release = threading.Event(), threading.Event()

        def held(*args, **kwargs):
            if not writing.is_set():
                writing.set()
                release.wait(60)
            return write(*args, **kwargs)

        svc.store.write_finished = held
        url = f"http://127.0.0.1:{svc.http_port}/v1/traces"
        sent = 0
        try:
            # one request at a time, each taken before the next, so that the write held is
            # the last group handed
            while not writing.is_set() and sent < len(requests) - 2:
                assert post_requests(requests[sent : sent + 1], url).failed == 0
                sent += 1
                assert until(svc.ingest.queue.empty, 60, 0.05)
                writing.wait(0.5)
            assert writing.is_set()
            pushed = svc.reconstructor.feed.tw.pushed
            assert post_requests(requests[sent : sent + 2], url).failed == 0
            went_on = until(lambda: svc.reconstructor.feed.tw.pushed > pushed, 60, 0.05)
            time.sleep(1.0)
            ready = get(svc, "/readyz")
        finally:
            release.set()
        assert post_requests(requests[sent + 2 :], url).failed == 0
        assert svc.wait_idle(60)
        status = get_json(svc, "/api/tacit/status")
        next_seq = svc.ingest.next_seq
        low_water = svc.store.state("low_water", 0)
    assert went_on, "the reconstruction waited for the write"
    assert ready[0] == 503 and ready[1].startswith(b"reconstruction has not moved on for ")
    assert status["received"] == status["stored"]["spans"] == len(spans)
    assert low_water == next_seq

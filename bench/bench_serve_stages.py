"""Benchmark: where ``tacit serve`` spends its CPU per span, stage by stage, without HTTP.

The sustained run of ``bench/bench_serve.py`` (the shop app with four times its instances at
1,200 requests/s for 20 s, 386,871 spans, encoded by the OpenTelemetry SDK's protobuf encoder
in batches of 512) goes through the service's own steps in one thread, each timed in CPU time
per span:

* check: decoding and checking a request body (``check_export_request``), as acknowledging it
  does;
* append: making the request durable (the store's journal: an append and a sync), as
  acknowledging it does;
* read: reading its spans into a table, which the service does on the thread that reconstructs;
* push: online TraceWeaver (§5.3), the rounds the requests set off and, at the end, those
  that finish the last traces;
* rows: the rows of the finished traces (assembling them, their Jaeger tags);
* tables: the rows as Arrow tables;
* write: appending them to the database file, with the journal's requests moved in.

The service adds to these its HTTP handling, its metrics and the switching between its threads.
The garbage collector runs with the service's thresholds. The whole is run ``--repeats`` times
(default 3); each stage's minimum is printed as one JSON object, steadier than one run on a
shared machine. ``--lateness S`` sets the windows' lateness (default the sustained run's 1 s;
the service's own default is 7 s).
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench_serve import ONLINE, STREAM_SCALE, _load
from tacit.experiment.otlp_load import encoded_requests
from tacit.formats.otlp import check_export_request
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.online import NS, OnlineParams
from tacit.serve.finished_rows import Rows, TakenIds, kept_ids
from tacit.serve.online_feed import OnlineFeed
from tacit.serve.service import GC_THRESHOLDS
from tacit.serve.store import Store
from tacit.simulate import load_app, simulate

STAGES = ("check", "append", "read", "push", "rows", "tables", "write")


def bodies(seconds: float) -> list[bytes]:
    """The sustained run's spans as the SDK's exporter encodes them, in order of span end."""
    return [body for _, body in encoded_requests(_load(2, seconds, STREAM_SCALE), shift_ns=0)]


def one_run(
    requests: list[bytes], callgraph, tmp: Path, online: OnlineParams = ONLINE
) -> tuple[dict[str, float], int]:
    """CPU seconds per stage over all ``requests``, and the spans they held."""
    spent = dict.fromkeys(STAGES, 0.0)
    clock = time.process_time

    def timed(stage: str, began: float) -> float:
        now = clock()
        spent[stage] += now - began
        return now

    store = Store(tmp / "stages.duckdb")
    feed = OnlineFeed(callgraph, online, 0)
    taken = TakenIds()
    seq = 0

    def store_finished(finished, alone, t: float) -> float:
        rows = Rows()
        for f in finished:
            numbers, given = feed.release(f)
            rows.add_finished(f, numbers, given, 1, 0, kept_ids(f, given, taken))
        for a in alone:
            rows.add_alone(a)
        t = timed("rows", t)
        tables = rows.tables(0)
        t = timed("tables", t)
        store.write_finished(tables, {"low_water": feed.low_water(seq)})
        return timed("write", t)

    try:
        for body in requests:
            t = clock()
            count, read = check_export_request(body, "protobuf", "request")
            t = timed("check", t)
            store.append_request(seq, count, 0, "protobuf", body)
            t = timed("append", t)
            spans, parent_ids = read()
            t = timed("read", t)
            fed = feed.push(spans, parent_ids, np.arange(seq, seq + len(spans)), np.inf)
            seq += len(spans)
            t = timed("push", t)
            if fed.finished or fed.alone:
                store_finished(fed.finished, fed.alone, t)
        t = clock()
        last = feed.advance(feed.tw.latest_end + 60e9)  # the last windows close
        store_finished(last, [], timed("push", t))
    finally:
        store.close()
    return spent, seq


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="of the app's load")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lateness", type=float, default=ONLINE.lateness_ns / NS, help="s")
    args = parser.parse_args()
    callgraph = learn_callgraph(simulate(load_app(), 5, n_requests=200, seed=1))
    requests = bodies(args.seconds)
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    runs = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            online = replace(ONLINE, lateness_ns=round(args.lateness * NS))
            spent, n = one_run(requests, callgraph, Path(tmp), online)
            runs.append(spent)
    gc.unfreeze()
    us = {s: round(min(r[s] for r in runs) / n * 1e6, 2) for s in STAGES}
    totals = [sum(r.values()) / n * 1e6 for r in runs]
    print(
        json.dumps(
            {
                "serve_stages": {
                    "spans": n,
                    "repeats": args.repeats,
                    "lateness_s": args.lateness,
                    "us_per_span_min": us,
                    "total_us_per_span": [round(x, 2) for x in totals],
                }
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()

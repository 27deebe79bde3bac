"""Benchmark: how fast the simulators that the demo, the tests and the other benchmarks use
generate their data.

Prints one JSON object:
- ``microservices``: the default shop app at 300 requests/s, 2,000 and 20,000 root requests:
  spans generated per second (one core, after a warm-up run).
- ``widearea``: the CDN setting at 1,000 requests/s for 60 s: messages generated per second.
Times are process CPU seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from tacit.simulate import load_app, simulate
from tacit.simulate.widearea import WideAreaParams, simulate_widearea


def timed(make: Callable[[], int]) -> dict:
    t0 = time.process_time()
    n = make()
    cpu = time.process_time() - t0
    return {"records": n, "cpu_seconds": round(cpu, 3), "records_per_second": round(n / cpu)}


def microservices() -> dict:
    shop = load_app(None)
    simulate(shop, 300, n_requests=100)  # warm-up
    return {
        f"{n} requests": timed(lambda n=n: len(simulate(shop, 300, n_requests=n)))
        for n in (2_000, 20_000)
    }


def widearea() -> dict:
    simulate_widearea(WideAreaParams(duration_s=1))  # warm-up
    return timed(lambda: len(simulate_widearea(WideAreaParams(rate=1000, duration_s=60)).messages))


def main() -> None:
    print(
        json.dumps(
            {"benchmark": "simulators", "microservices": microservices(), "widearea": widearea()},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()

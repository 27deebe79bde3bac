"""The demo job: reconstruction accuracy of every algorithm as load rises, on a simulated app.

The call graph is learned from a separate low-load run (the "isolated test traces" of
TraceWeaver §5.2.2); each load level is then blinded, reconstructed and scored. Writes the
TraceWeaver traces of the highest load as Jaeger JSON and an HTML report with the
accuracy-versus-load plot.

Then the instrumentation-free path: the same app's RPCs as the packets one capture point would
hold (HTTP/1.1 into the frontend, gRPC behind it; :mod:`tacit.simulate.app_packets`), for a
test run of requests one at a time and for one load level, written as pcap files with the
address-to-service map that ``tacit capture`` reads, and scored from the packets alone.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import yaml

from tacit.errors import ConfigError
from tacit.evaluation.capture_accuracy import evaluate_capture
from tacit.evaluation.reconstruction import evaluate
from tacit.formats.capture_spans import ServiceMap
from tacit.formats.jaeger import write_jaeger
from tacit.formats.pcap_write import write_pcap
from tacit.model.roles import infer_roles
from tacit.outputs import write_bytes
from tacit.reconstruct.callgraph import learn_callgraph
from tacit.reconstruct.pipeline import ALGORITHMS, reconstruct_blind
from tacit.simulate import load_app, simulate
from tacit.simulate.app_packets import REQUEST_ID, app_packets
from tacit.simulate.app_spec import AppSpec

DEMO_RATES = (100, 300, 500, 700)
"""Requests per second; the default app's database saturates near 850."""


def run_demo(out_dir: Path, *, requests: int = 400, rates: tuple[int, ...] = DEMO_RATES) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    app = load_app(None)
    test_env = infer_roles(simulate(app, 10, n_requests=200, seed=1))
    callgraph = learn_callgraph(test_env.spans)
    callgraph.save(out_dir / "callgraph.yaml")
    if not rates:
        raise ConfigError("the demo needs at least one load")
    loads = []
    for i, rate in enumerate(rates):
        # A sidecar sees no thread ids: the thread-based baseline gets one thread per instance.
        spans = simulate(app, rate, n_requests=requests, seed=100 + i, record_threads=False)
        ev = evaluate(spans, ALGORITHMS, callgraph=callgraph)
        loads.append(
            {
                "rate": rate,
                "spans": ev.spans,
                "accuracy": {r["algorithm"]: r["accuracy"] for r in ev.results},
                "link_accuracy": {r["algorithm"]: r["link_accuracy"] for r in ev.results},
            }
        )
    # The highest load's traces, as TraceWeaver reconstructs them.
    traces, tags, _ = reconstruct_blind(infer_roles(spans).without_truth(), callgraph)
    trace_path = out_dir / "traces.jaeger.json"
    write_jaeger(trace_path, traces, tags)
    report = out_dir / "report.html"
    write_bytes(report, _report(app.name, loads, requests).encode())
    return {
        "app": app.name,
        "algorithms": list(ALGORITHMS),
        "loads": loads,
        "traces": str(trace_path),
        "report": str(report),
        "capture": _from_packets(app, out_dir / "capture", rates[0], requests),
    }


def _from_packets(app: AppSpec, out_dir: Path, rate: int, requests: int) -> dict:
    """Capture files of a test run and of one load level, and their traces' accuracy from the
    packets alone."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {"test": out_dir / "test.pcap", "app": out_dir / "app.pcap"}
    runs = {
        "test": simulate(app, 2, n_requests=100, seed=1, record_threads=False),
        "app": simulate(app, rate, n_requests=requests, seed=100, record_threads=False),
    }
    names: dict[str, str] = {}
    made = {key: app_packets(spans) for key, spans in runs.items()}
    for key, packets in made.items():
        write_pcap(files[key], packets.frames, packets.times)
        names |= packets.service_map()
    services = out_dir / "services.yaml"
    write_bytes(services, yaml.safe_dump(names).encode())
    doc = evaluate_capture(
        files["app"],
        files["test"],
        REQUEST_ID,
        made["app"].parent_of(),
        ServiceMap(addresses=names),
    )
    return {
        "rate": rate,
        "pcap": str(files["app"]),
        "test_pcap": str(files["test"]),
        "services": str(services),
        "accuracy": doc["accuracy"],
    }


def _report(app: str, loads: list[dict], requests: int) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
    rates = [x["rate"] for x in loads]
    for a in ALGORITHMS:
        ax.plot(rates, [100 * x["accuracy"][a] for x in loads], marker="o", label=a)
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel("end-to-end accuracy (%)")
    ax.set_ylim(0, 101)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    img = base64.b64encode(buf.getvalue()).decode()
    head = "".join(f"<th>{html.escape(a)}</th>" for a in ALGORITHMS)
    rows = "".join(
        f"<tr><td>{x['rate']}</td>"
        + "".join(f"<td>{100 * x['accuracy'][a]:.1f}%</td>" for a in ALGORITHMS)
        + "</tr>"
        for x in loads
    )
    return (
        "<!doctype html><meta charset='utf-8'><title>tacit demo</title>"
        "<style>body{font-family:sans-serif;max-width:760px;margin:2em auto}"
        "td,th{padding:4px 10px;text-align:right}</style>"
        f"<h1>Trace reconstruction on the simulated app '{html.escape(app)}'</h1>"
        f"<p>{requests} requests per load level; call graph learned from a separate low-load run. "
        "Accuracy is the share of traces whose every parent-child link is right.</p>"
        f"<img alt='accuracy versus load' src='data:image/png;base64,{img}'>"
        f"<table><tr><th>load</th>{head}</tr>{rows}</table>"
    )

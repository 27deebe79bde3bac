"""A self-contained HTML report of slow traces: each one's spans as a Gantt chart (inline SVG)
with its critical path highlighted and its top contributors listed (YTrace §4 localization)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import numpy as np

from tacit.diagnosis.critical_path import CriticalPaths

WIDTH = 960
LABEL = 300
ROW = 16
CRITICAL = "#d62728"
OTHER = "#9aa5b1"
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
h2{font-size:1.05em;margin-top:2em}
table{border-collapse:collapse;font-size:.9em}
td,th{padding:2px 10px;text-align:right}td:first-child,th:first-child{text-align:left}
svg text{font-size:11px;font-family:ui-monospace,monospace}
"""


def render_report(
    cp: CriticalPaths, traces: Sequence[int] | np.ndarray, title: str, top: int = 5
) -> str:
    """The report for trace indices ``traces`` of ``cp`` (e.g. the slowest or the flagged)."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f"<p>{len(traces)} of {len(cp)} traces. Critical path in "
        f"<span style='color:{CRITICAL}'>red</span>; times in ms from the trace's start, "
        "callee clocks aligned to their callers.</p>",
    ]
    if cp.warnings:
        items = "".join(f"<li>{escape(k)}: {v}</li>" for k, v in cp.warnings.items())
        parts.append(f"<ul>{items}</ul>")
    for i in traces:
        parts.append(_trace_section(cp, int(i), top))
    parts.append("</body></html>")
    return "\n".join(parts)


def _trace_section(cp: CriticalPaths, i: int, top: int) -> str:
    g = cp.graph
    spans = g.spans
    root = cp.root[i]
    rows = np.flatnonzero(g.in_trace & (g.root == root))
    rows = rows[np.lexsort((-g.end[rows], g.start[rows]))]
    t0 = int(g.start[root])
    span_ns = max(int(g.end[rows].max()) - t0, 1)
    scale = (WIDTH - LABEL - 10) / span_ns
    height = ROW * (len(rows) + 1)
    svg = [f"<svg width='{WIDTH}' height='{height}' xmlns='http://www.w3.org/2000/svg'>"]
    for y, r in enumerate(rows.tolist()):
        top_y = y * ROW + 2
        x = LABEL + (int(g.start[r]) - t0) * scale
        w = max((int(g.end[r]) - int(g.start[r])) * scale, 1.0)
        colour = CRITICAL if cp.on_path[r] else OTHER
        label = f"{spans.name('service', r)} {spans.name('endpoint', r)}"
        tip = (
            f"{label}: {(g.end[r] - g.start[r]) / 1e6:.3f} ms, on path {cp.self_ns[r] / 1e6:.3f} ms"
        )
        svg.append(
            f"<text x='2' y='{top_y + ROW - 5}'>{escape(label[:44])}</text>"
            f"<rect x='{x:.1f}' y='{top_y}' width='{w:.1f}' height='{ROW - 4}' "
            f"fill='{colour}'><title>{escape(tip)}</title></rect>"
        )
    svg.append(
        f"<text x='{LABEL}' y='{height - 3}'>0</text>"
        f"<text x='{WIDTH - 70}' y='{height - 3}'>{span_ns / 1e6:.3f} ms</text></svg>"
    )
    table = ["<table><tr><th>service</th><th>ms on critical path</th><th>share</th></tr>"]
    for name, ns, share in cp.top(i, top):
        table.append(
            f"<tr><td>{escape(name)}</td><td>{ns / 1e6:.3f}</td><td>{100 * share:.1f}%</td></tr>"
        )
    table.append("</table>")
    head = (
        f"<h2>trace {escape(cp.trace_name(i))}: {cp.latency[i] / 1e6:.3f} ms, "
        f"{len(rows)} spans</h2>"
    )
    return head + "".join(svg) + "".join(table)

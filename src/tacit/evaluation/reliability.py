"""A reliability diagram of each algorithm's link and trace probabilities, as one self-contained
HTML page (inline SVG): per bin of predicted probability (:func:`.calibration.calibration`), a
bar as high as the share of the bin's links (or traces) that were right, beside the diagonal a
calibrated predictor would follow; each bin's count, and the ECE in the heading. A bar below
the diagonal is overconfidence, above it underconfidence."""

from __future__ import annotations

from html import escape
from typing import Any

SIZE = 260
"""Width and height of a diagram's plot area (pixels)."""
MARGIN = 40
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
h2{font-size:1.05em;margin-top:1.5em}
figure{display:inline-block;margin:0 2em 1em 0}figcaption{font-size:.9em}
svg text{font-size:10px;font-family:ui-monospace,monospace}
.bar{fill:#4c78a8}.gap{fill:#e45756;opacity:.35}.diagonal{stroke:#888;stroke-dasharray:4 3}
"""


def render_reliability(results: list[dict[str, Any]], title: str) -> str:
    """The page for ``results`` (an evaluation's, :meth:`.reconstruction.Evaluation.as_dict`),
    one section per algorithm that reports a calibration."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        "<p>Bars: the share right among the links (traces) whose probability fell in each "
        "tenth; dashed: where a calibrated probability puts them; shaded: the gap. ECE: the "
        "gaps weighed by each bin's share.</p>",
    ]
    shown = [r for r in results if r.get("calibration")]
    if not shown:
        parts.append("<p>No algorithm reported probabilities.</p>")
    for r in shown:
        parts.append(f"<h2 data-algorithm='{escape(r['algorithm'])}'>{escape(r['algorithm'])}</h2>")
        for kind in ("links", "traces"):
            parts.append(_diagram(r["algorithm"], kind, r["calibration"][kind]))
    parts.append("</body></html>")
    return "\n".join(parts)


def _diagram(algorithm: str, kind: str, cal: dict[str, Any]) -> str:
    ece = "—" if cal["ece"] is None else f"{cal['ece']:.3f}"
    side = SIZE + 2 * MARGIN
    svg = [
        f"<svg width='{side}' height='{side}' xmlns='http://www.w3.org/2000/svg' "
        f"data-kind='{kind}' data-ece='{cal['ece'] if cal['ece'] is not None else ''}'>",
        f"<rect x='{MARGIN}' y='{MARGIN}' width='{SIZE}' height='{SIZE}' fill='none' "
        "stroke='#ccc'/>",
        f"<line class='diagonal' x1='{MARGIN}' y1='{MARGIN + SIZE}' x2='{MARGIN + SIZE}' "
        f"y2='{MARGIN}'/>",
    ]
    width = SIZE / len(cal["bins"])
    for i, b in enumerate(cal["bins"]):
        x = MARGIN + i * width
        if b["n"]:
            acc, p = b["accuracy"], b["probability"]
            top, mid = _y(acc), _y(p)
            svg.append(
                f"<rect class='bar' x='{x + 1:.1f}' y='{top:.1f}' width='{width - 2:.1f}' "
                f"height='{MARGIN + SIZE - top:.1f}' data-bin='{i}' data-n='{b['n']}' "
                f"data-accuracy='{acc}' data-probability='{p}'><title>{b['lo']:.1f}–"
                f"{b['hi']:.1f}: {b['n']} {kind}, mean probability {p:.3f}, right "
                f"{acc:.3f}</title></rect>"
            )
            svg.append(
                f"<rect class='gap' x='{x + 1:.1f}' y='{min(top, mid):.1f}' "
                f"width='{width - 2:.1f}' height='{abs(top - mid):.1f}'/>"
            )
        svg.append(
            f"<text x='{x + width / 2:.1f}' y='{MARGIN - 4}' text-anchor='middle'>{b['n']}</text>"
        )
    for t in (0, 0.5, 1):
        svg.append(
            f"<text x='{MARGIN + t * SIZE:.1f}' y='{MARGIN + SIZE + 14}' "
            f"text-anchor='middle'>{t:g}</text>"
            f"<text x='{MARGIN - 6}' y='{_y(t) + 3:.1f}' text-anchor='end'>{t:g}</text>"
        )
    svg.append(
        f"<text x='{MARGIN + SIZE / 2}' y='{side - 6}' text-anchor='middle'>predicted "
        "probability</text>"
    )
    svg.append("</svg>")
    return (
        f"<figure>{''.join(svg)}<figcaption>{escape(algorithm)}, {kind}: {cal['n']} (per "
        f"bin above the bars), ECE {ece}</figcaption></figure>"
    )


def _y(value: float) -> float:
    """The vertical position of ``value`` (0 to 1) in the plot area."""
    return MARGIN + SIZE * (1 - value)

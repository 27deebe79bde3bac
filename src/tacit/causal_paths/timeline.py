"""Timeline drawings of causal path patterns, after WAP5 (Reynolds et al., WWW '06, Figs. 10–14).

WAP5 shows each causal path pattern it finds as a timeline: one vertical column per node, time
flowing downward, a box on a node's column for each stay of the path at that node (from the receipt
of a message to the send of the next one, labelled with the mean node delay), and a slanted arrow
per message from the sender's column at its send time to the receiver's column at its receive
time, labelled with the mean network delay. Untraced nodes appear as diamonds: their own delay is
unknown, so they get no box, and the message they send back is labelled with the round trip the
caller saw instead (see :mod:`.patterns`).

Mean event times come from walking the pattern's tree (:func:`event_times`). The vertical axis is
to scale except that intervals shorter than a minimum gap are stretched, so that events close
together stay readable; the left margin gives each event's time in ms.

Only matplotlib's object API is used (:class:`matplotlib.figure.Figure`, no pyplot and no global
backend), so drawing is safe in servers and tests.
"""

from __future__ import annotations

import itertools
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from tacit.causal_paths.patterns import Hop, Pattern
from tacit.outputs import atomic_output

NS_PER_MS = 1e6

# Layout, in inches (the axes fill the figure and use inches as data units).
_COLUMN = 1.7  # distance between node columns
_BOX = 0.72  # width of a node-delay box
_LEFT = 1.0  # margin for the time ticks
_RIGHT = 0.25
_MIN_STEP = 0.28  # smallest vertical gap between two distinct event times
_MIN_WIDTH = 6.0
_LABEL_PT = 7.5
_CHAR = 0.6 * _LABEL_PT / 72  # approximate width of one character of a label
_LINE = 1.45 * _LABEL_PT / 72  # approximate height of a label

_BOX_FACE, _BOX_EDGE = "#dce8f5", "#3f6a96"
_MSG, _RTT, _UNKNOWN = "#222222", "#b3590a", "#8a8a8a"

_LEGEND = (
    "box: mean delay at the node, from receiving a message to sending the next one · "
    "arrow: mean one-way network delay · diamond: untraced node, no delay of its own; "
    "its reply is labelled with the round trip (rtt) seen by the caller · "
    "dashed: delay not measured · short intervals are stretched to stay readable"
)


def format_ms(ns: float) -> str:
    """A delay in nanoseconds as the label text used in the drawings, e.g. ``"12.000 ms"``."""
    return f"{ns / NS_PER_MS:.3f} ms"


def node_delay_label(hop: Hop) -> str | None:
    """The label of the box before ``hop`` is sent: its mean node delay; None when unknown."""
    return None if hop.node_delay_ns is None else format_ms(hop.node_delay_ns)


def network_delay_label(hop: Hop) -> str | None:
    """The label of ``hop``'s arrow: the one-way delay, or ``"rtt …"`` when the sender is
    untraced (its network delay is then the caller's round trip); None when unknown."""
    if hop.network_delay_ns is None:
        return None
    text = format_ms(hop.network_delay_ns)
    return text if hop.src_traced else f"rtt {text}"


def summary_line(pattern: Pattern) -> str:
    """The statistics line under a drawing's title: count, expected count, best instance's
    probability and mean end-to-end latency."""
    latency = "unknown" if pattern.mean_latency_ns is None else format_ms(pattern.mean_latency_ns)
    return (
        f"count {pattern.count} · expected {pattern.expected:.2f} · "
        f"max probability {pattern.max_probability:.2f} · mean latency {latency} · "
        f"{len(pattern.hops)} hops"
    )


def _children(hops: Sequence[Hop]) -> dict[int, list[int]]:
    """Indices of each hop's children by the parent's index (-1: roots), in the given order."""
    index = {h.position: i for i, h in enumerate(hops)}
    kids: dict[int, list[int]] = {}
    for i, h in enumerate(hops):
        parent = index.get(h.parent, -1) if h.parent >= 0 else -1
        kids.setdefault(parent, []).append(i)
    return kids


def event_times(pattern: Pattern) -> list[tuple[float, float]]:
    """Mean (send, receive) time in ms of every hop, in the order of ``pattern.hops``.

    The tree is walked from the root, sent at 0: a message is received its network delay after
    it is sent, and a child is sent its node delay after its parent was received (parallel
    children all start from that receipt). Unknown delays count as 0. A hop sent by an untraced
    node carries the caller's round trip as its network delay; since the message into that node
    has no receive time (so no network delay), the reply lands exactly one round trip after the
    caller's send, as WAP5 draws it (Figs. 10–14).
    """
    hops = pattern.hops
    kids = _children(hops)
    times: list[tuple[float, float] | None] = [None] * len(hops)
    todo = [(i, 0.0) for i in kids.get(-1, [])]
    while todo:
        i, send = todo.pop()
        recv = send + (hops[i].network_delay_ns or 0.0) / NS_PER_MS
        times[i] = (send, recv)
        for c in kids.get(i, []):
            todo.append((c, recv + (hops[c].node_delay_ns or 0.0) / NS_PER_MS))
    if any(t is None for t in times):
        raise ValueError("the pattern's hops do not form a tree")
    return [t for t in times if t is not None]


def _columns(hops: Sequence[Hop], kids: dict[int, list[int]]) -> list[str]:
    """Node names in the order the path first reaches them (depth first), one column each."""
    order: list[str] = []
    seen: set[str] = set()

    def add(name: str) -> None:
        if name not in seen:
            seen.add(name)
            order.append(name)

    todo = list(reversed(kids.get(-1, [])))
    while todo:
        i = todo.pop()
        add(hops[i].src)
        add(hops[i].dst)
        todo.extend(reversed(kids.get(i, [])))
    return order


def _key(t: float) -> float:
    """Event times closer than a nanosecond are one time."""
    return round(t, 6)


def _vertical(times: Sequence[float], n_hops: int) -> dict[float, float]:
    """Depth (inches below the first event) of every distinct event time: proportional to time,
    but never less than ``_MIN_STEP`` between consecutive times."""
    distinct = sorted({_key(t) for t in times})
    span = distinct[-1] - distinct[0]
    height = 2.5 + 0.12 * n_hops
    depth = {distinct[0]: 0.0}
    y = 0.0
    for a, b in itertools.pairwise(distinct):
        y += max(_MIN_STEP, (b - a) / span * height)
        depth[b] = y
    return depth


@dataclass
class _Labels:
    """Greedy placement of labels so that they do not cover each other."""

    boxes: list[tuple[float, float, float, float]]

    @staticmethod
    def extent(
        x: float, y: float, text: str, angle: float = 0.0
    ) -> tuple[float, float, float, float]:
        w, h = len(text) * _CHAR + 0.06, _LINE
        a = math.radians(angle)
        bw = w * abs(math.cos(a)) + h * abs(math.sin(a))
        bh = w * abs(math.sin(a)) + h * abs(math.cos(a))
        return (x - bw / 2, y - bh / 2, x + bw / 2, y + bh / 2)

    def free(self, box: tuple[float, ...]) -> bool:
        return all(
            box[2] <= b[0] or b[2] <= box[0] or box[3] <= b[1] or b[3] <= box[1] for b in self.boxes
        )

    def place(
        self, candidates: Sequence[tuple[float, float]], text: str, angle: float = 0.0
    ) -> tuple[float, float]:
        """The first candidate position where the label fits (else the first), now taken."""
        chosen = candidates[0]
        for x, y in candidates:
            if self.free(self.extent(x, y, text, angle)):
                chosen = (x, y)
                break
        self.boxes.append(self.extent(*chosen, text, angle))
        return chosen


@dataclass(frozen=True)
class _Layout:
    """Where the parts of one drawing go: node columns, the depth of every event time, and the
    figure's size, in inches from the top left."""

    pattern: Pattern
    times: list[tuple[float, float]]
    kids: dict[int, list[int]]
    nodes: list[str]
    column: dict[str, int]
    traced: dict[str, bool]
    depth: dict[float, float]
    stagger: bool  # names too long for their column alternate between two heights
    legend: list[str]
    width: float
    height: float
    top: float  # where the first event is drawn
    bottom: float  # below the last event

    @classmethod
    def of(cls, pattern: Pattern) -> _Layout:
        """The layout of ``pattern``'s drawing; a pattern without hops cannot be drawn."""
        hops = pattern.hops
        if not hops:
            raise ValueError("cannot draw a pattern without hops")
        times = event_times(pattern)
        kids = _children(hops)
        nodes = _columns(hops, kids)
        depth = _vertical([t for pair in times for t in pair], len(hops))

        # Which nodes are traced (any of their events has a timestamp).
        traced = dict.fromkeys(nodes, False)
        for h in hops:
            traced[h.src] |= h.src_traced
            traced[h.dst] |= h.dst_traced

        width = max(_MIN_WIDTH, _LEFT + _COLUMN * len(nodes) + _RIGHT)
        stagger = any(len(n) * 0.075 > _COLUMN - 0.1 for n in nodes) and len(nodes) > 1
        title_h = 0.7
        names_h = 0.6 + (0.2 if stagger else 0.0)
        top = title_h + names_h
        timeline_h = max(depth.values())
        legend = textwrap.wrap(_LEGEND, max(40, int((width - 0.3) / (0.6 * 7 / 72))))
        height = top + timeline_h + 0.45 + 0.16 * len(legend) + 0.2
        column = {n: j for j, n in enumerate(nodes)}
        bottom = top + timeline_h + 0.2
        return cls(
            pattern=pattern,
            times=times,
            kids=kids,
            nodes=nodes,
            column=column,
            traced=traced,
            depth=depth,
            stagger=stagger,
            legend=legend,
            width=width,
            height=height,
            top=top,
            bottom=bottom,
        )

    def x(self, node: str) -> float:
        """The middle of ``node``'s column."""
        return _LEFT + _COLUMN * (self.column[node] + 0.5)

    def y(self, t: float) -> float:
        """How far below the top event time ``t`` (ms) is drawn."""
        return self.top + self.depth[_key(t)]


def _figure(pattern: Pattern, title: str | None) -> Figure:
    """The timeline of ``pattern``, drawn part by part: heading, node columns, time axis,
    stays, event markers, messages, legend."""
    layout = _Layout.of(pattern)
    fig = Figure(figsize=(layout.width, layout.height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, layout.width)
    ax.set_ylim(layout.height, 0)  # inches from the top: time flows downward
    ax.set_axis_off()
    _draw_heading(ax, pattern, title)
    _draw_columns(ax, layout)
    _draw_time_axis(ax, layout)
    labels = _Labels([])
    boxed_send, boxed_recv = _draw_stays(ax, layout, labels)
    _draw_marks(ax, layout, boxed_send, boxed_recv)
    for i in range(len(pattern.hops)):
        _draw_message(ax, layout, labels, i, i in boxed_send, i in boxed_recv)
    ax.text(
        0.15,
        layout.bottom + 0.2,
        "\n".join(layout.legend),
        fontsize=7,
        color="#555555",
        va="top",
        ha="left",
        linespacing=1.3,
    )
    return fig


def _draw_heading(ax: Axes, pattern: Pattern, title: str | None) -> None:
    """The title and the statistics line."""
    ax.text(
        0.15,
        0.12,
        title or f"pattern {pattern.key:016x}",
        fontsize=11,
        weight="bold",
        va="top",
        ha="left",
    )
    ax.text(0.15, 0.42, summary_line(pattern), fontsize=8.5, va="top", ha="left", color="#333333")


def _draw_columns(ax: Axes, layout: _Layout) -> None:
    """Each node's name, "untraced" under it for an untraced node, and its vertical line."""
    top = layout.top
    for j, n in enumerate(layout.nodes):
        x = layout.x(n)
        lift = 0.2 if layout.stagger and j % 2 else 0.0
        ax.text(x, top - 0.3 - lift, n, fontsize=9.5, weight="bold", ha="center", va="bottom")
        if not layout.traced[n]:
            ax.text(
                x,
                top - 0.28 - lift,
                "untraced",
                fontsize=7,
                style="italic",
                color="#666666",
                ha="center",
                va="top",
            )
        ax.plot([x, x], [top - 0.05, layout.bottom], color="#c8c8c8", lw=0.9, zorder=0)


def _draw_time_axis(ax: Axes, layout: _Layout) -> None:
    """Time ticks in the left margin and faint grid lines across."""
    top = layout.top
    ax.text(
        _LEFT - 0.12, top - 0.3, "time (ms)", fontsize=7, color="#666666", ha="right", va="bottom"
    )
    for t, d in layout.depth.items():
        ax.text(
            _LEFT - 0.12, top + d, f"{t:.3f}", fontsize=7, color="#666666", ha="right", va="center"
        )
        ax.plot(
            [_LEFT - 0.06, layout.width - _RIGHT],
            [top + d, top + d],
            color="#eeeeee",
            lw=0.6,
            zorder=0,
        )


def _draw_stays(ax: Axes, layout: _Layout, labels: _Labels) -> tuple[set[int], set[int]]:
    """One box per receipt followed by sends of known delay at the same node; returns the hops
    sent from a box and the hops received into one."""
    hops = layout.pattern.hops
    boxed_send: set[int] = set()
    boxed_recv: set[int] = set()
    for p, children in layout.kids.items():
        if p < 0:
            continue
        by_node: dict[str, list[int]] = {}
        for c in children:
            by_node.setdefault(hops[c].src, []).append(c)
        for node, group in by_node.items():
            timed = [c for c in group if hops[c].node_delay_ns is not None]
            if not timed:
                continue
            if node == hops[p].dst:
                boxed_recv.add(p)
            boxed_send.update(timed)
            _draw_stay(ax, layout, labels, p, node, timed)
    return boxed_send, boxed_recv


def _draw_stay(
    ax: Axes, layout: _Layout, labels: _Labels, parent: int, node: str, timed: list[int]
) -> None:
    """The box at ``node`` from the receipt of hop ``parent`` to the last of the sends
    ``timed``, a tick at each earlier send, and each send's node delay (with its destination
    when they go to several)."""
    hops, times = layout.pattern.hops, layout.times
    start = layout.y(times[parent][1])
    end = max(layout.y(times[c][0]) for c in timed)
    x = layout.x(node)
    ax.add_patch(
        Rectangle(
            (x - _BOX / 2, start),
            _BOX,
            max(end - start, 0.05),
            facecolor=_BOX_FACE,
            edgecolor=_BOX_EDGE,
            lw=1.0,
            zorder=2,
        )
    )
    several = len({hops[c].dst for c in timed}) > 1
    for c in sorted(timed, key=lambda c: times[c][0]):
        send = layout.y(times[c][0])
        if send < end:  # an earlier send from the same stay
            ax.plot([x - _BOX / 2, x + _BOX / 2], [send, send], color=_BOX_EDGE, lw=0.8, zorder=2)
        text = node_delay_label(hops[c]) or ""
        if several:
            text = f"{text} → {hops[c].dst}"
        mid = (start + send) / 2
        steps = (0.0, _LINE, -_LINE, 2 * _LINE, -2 * _LINE)
        lx, ly = labels.place([(x, mid + s) for s in steps], text)
        ax.text(
            lx,
            ly,
            text,
            fontsize=_LABEL_PT,
            ha="center",
            va="center",
            zorder=6,
            bbox=dict(boxstyle="square,pad=0.1", fc=_BOX_FACE, ec="none"),
        )


def _draw_marks(ax: Axes, layout: _Layout, boxed_send: set[int], boxed_recv: set[int]) -> None:
    """Event markers: diamonds at untraced nodes, dots where a traced event has no box."""
    marks: dict[tuple[str, float], bool] = {}
    for i, h in enumerate(layout.pattern.hops):
        send, recv = layout.times[i]
        if i not in boxed_send:
            marks.setdefault((h.src, _key(send)), h.src_traced)
        if i not in boxed_recv:
            marks.setdefault((h.dst, _key(recv)), h.dst_traced)
    for (node, t), is_traced in marks.items():
        x, y = layout.x(node), layout.y(t)
        if is_traced:
            ax.plot(x, y, marker="o", ms=3.5, color=_BOX_EDGE, zorder=5)
        else:
            ax.plot(x, y, marker="D", ms=7, mfc="white", mec="#444444", mew=1.0, zorder=5)


def _draw_message(
    ax: Axes, layout: _Layout, labels: _Labels, i: int, boxed_send: bool, boxed_recv: bool
) -> None:
    """Hop ``i``'s arrow, from the edge of a box where it leaves or enters one (a message to
    the sender itself loops out to the right), dashed when its delay is unknown, and its
    label."""
    h = layout.pattern.hops[i]
    send, recv = layout.times[i]
    sx, sy = layout.x(h.src), layout.y(send)
    ex, ey = layout.x(h.dst), layout.y(recv)
    direction = 1.0 if ex >= sx else -1.0
    if boxed_send:
        sx += direction * _BOX / 2
    if boxed_recv:
        ex -= direction * _BOX / 2
    known = h.network_delay_ns is not None
    color = _UNKNOWN if not known else (_MSG if h.src_traced else _RTT)
    self_message = h.src == h.dst
    if self_message:
        sx, ex = layout.x(h.src) + _BOX / 2, layout.x(h.dst) + _BOX / 2
    ax.add_patch(
        FancyArrowPatch(
            (sx, sy),
            (ex, ey),
            arrowstyle="-|>",
            mutation_scale=9,
            color=color,
            lw=1.1,
            linestyle="-" if known else (0, (4, 3)),
            shrinkA=0.0 if boxed_send else 4.0,
            shrinkB=0.0 if boxed_recv else 5.0,
            connectionstyle="arc3,rad=-0.6" if self_message else "arc3",
            zorder=3,
        )
    )
    label = network_delay_label(h)
    if label is None:
        return
    if self_message:
        _label_self_message(ax, labels, (sx, sy), ey, label, color)
        return
    _label_message(ax, labels, (sx, sy), (ex, ey), label, color, layout.x(h.src), layout.x(h.dst))


def _label_self_message(
    ax: Axes, labels: _Labels, start: tuple[float, float], end_y: float, text: str, color: str
) -> None:
    """Write the delay of a message from a node to itself right of its loop."""
    sx, sy = start
    x, y = labels.place([(sx + 0.35 + len(text) * _CHAR / 2, (sy + end_y) / 2)], text)
    ax.text(
        x,
        y,
        text,
        fontsize=_LABEL_PT,
        color=color,
        ha="center",
        va="center",
        zorder=6,
        bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none"),
    )


def _label_message(
    ax: Axes,
    labels: _Labels,
    start: tuple[float, float],
    end: tuple[float, float],
    text: str,
    color: str,
    src_x: float,
    dst_x: float,
) -> None:
    """Write a message's delay on its arrow, rotated along it, in a gap between two columns
    (the one next to the sender first) where it covers no other label."""
    (sx, sy), (ex, ey) = start, end
    angle = math.degrees(math.atan2(-(ey - sy), ex - sx))
    if angle > 90:
        angle -= 180
    elif angle < -90:
        angle += 180
    gaps = max(1, round(abs(dst_x - src_x) / _COLUMN))
    step = math.copysign(_COLUMN, dst_x - src_x)
    candidates = []
    for g in range(gaps):
        for shift in (0.0, -0.22, 0.22):
            x = src_x + step * (g + 0.5 + shift)
            f = (x - sx) / (ex - sx) if ex != sx else 0.5
            f = min(max(f, 0.0), 1.0)
            candidates.append((sx + f * (ex - sx), sy + f * (ey - sy)))
    x, y = labels.place(candidates, text, angle)
    ax.text(
        x,
        y,
        text,
        fontsize=_LABEL_PT,
        color=color,
        ha="center",
        va="center",
        rotation=angle,
        rotation_mode="anchor",
        zorder=6,
        bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none"),
    )


def _outputs(path: str | Path) -> tuple[Path, Path]:
    base = Path(path)
    if base.suffix.lower() in (".svg", ".png"):
        base = base.with_suffix("")
    return base.with_name(base.name + ".svg"), base.with_name(base.name + ".png")


def draw_timeline(pattern: Pattern, path: str | Path, title: str | None = None) -> list[Path]:
    """Draw ``pattern`` as a WAP5 timeline (Reynolds et al., WWW '06, Figs. 10–14).

    Writes ``path`` with the suffixes ``.svg`` and ``.png`` (a ``.svg``/``.png`` suffix already on
    ``path`` is replaced) and returns both paths. ``title`` is the first line (default: the
    pattern's key); the second gives the count, expected count, best probability and mean
    latency. Text stays text in the SVG, so the drawings can be searched.
    """
    fig = _figure(pattern, title)
    svg, png = _outputs(path)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tacit-timeline"}):
        with atomic_output(svg) as f:
            fig.savefig(f, format="svg", metadata={"Date": None})
        with atomic_output(png) as f:
            fig.savefig(f, format="png", dpi=100)
    return [svg, png]


def draw_timelines(patterns: Sequence[Pattern], directory: str | Path, top: int = 5) -> list[Path]:
    """Draw the first ``top`` patterns (as ranked by the caller) into ``directory`` as
    ``pattern-01.svg``/``.png``, ``pattern-02…``; returns every file written."""
    out: list[Path] = []
    directory = Path(directory)
    for rank, pattern in enumerate(patterns[: max(top, 0)], start=1):
        title = f"pattern {rank:02d} · {pattern.key:016x}"
        out += draw_timeline(pattern, directory / f"pattern-{rank:02d}", title=title)
    return out

"""The nesting algorithm for call-return (RPC) message traces.

Project 5: Aguilera, Mogul, Wiener, Reynolds and Muthitacharoen, "Performance Debugging for
Distributed Systems of Black Boxes", SOSP '03, §4 ("the nesting algorithm"); WAP5 (Reynolds et
al., WWW '06) uses it as the point of comparison for its own linking. The algorithm:

1. **Pair calls with returns.** A call is a message A→B; its return is the next message B→A on
   the same connection (``flow``). A connection may carry several call/return pairs in
   sequence, in either direction.
2. **Find nesting relationships.** At each node B, a call B→C is observed on B's clock as the
   interval [send of the call, receive of its return]; a call A→B as [receive of the call, send
   of its return]. The candidate parents of B→C are the calls A→B whose interval encloses it.
   Only one node's own timestamps are ever compared, so clock offsets between hosts never mix.
3. **Resolve ambiguity.** For each pair (parent edge A→B, child edge B→C) a histogram of the
   delay from the parent call's arrival at B to the child call's departure from B is learned
   from the trace itself, from the nestings that have a single candidate. Each child with
   several candidates goes to the candidate whose delay is most frequent in its histogram.
4. **Roots and call paths.** A call with no enclosing candidate is a root. The parent links
   form call trees, which are aggregated into call path patterns (tree shapes over node names)
   with counts.

Choices the paper leaves open, and what this module does:

- *Ordering a connection.* Messages of one connection are ordered by the clock of the side that
  stamped more of them (send times of the messages it sent, receive times of those it got); a
  message without that side's stamp falls back to the other side's (the only place two clocks
  can meet, and only for partially traced connections). Ties keep input order.
- *Unpaired messages.* A message with ``flow == -1`` or without any timestamp cannot be placed;
  a call whose next message on the connection goes the same way, or which ends the connection,
  has no return. Each is counted under its reason (:data:`UNPAIRED_REASONS`); unpaired calls
  take no part in nesting (the algorithm nests call-return pairs only).
- *Enclosure* is inclusive (``parent start <= child start`` and ``child end <= parent end``).
  A call whose caller-side interval lacks a stamp cannot be nested (it is a root, counted as
  ``unobservable_children``); one whose callee-side interval lacks a stamp cannot be a parent.
- *Score.* The score of candidate parent P for child C is the number of single-candidate
  nestings of C's edge whose parent edge is P's and whose delay falls in the same bin: the
  empirical joint frequency of (parent edge, delay bin) given the child edge. Between
  candidates of the same parent edge this is exactly the histogram frequency; across parent
  edges it also weighs how often each edge is the sole parent. All candidates of one child are
  binned with the same width (one width per child edge), so their counts compare.
- *Bin width.* :attr:`NestingParams.bin_width_ns` fixes it; by default each child edge gets the
  Freedman–Diaconis width (2·IQR·n^(-1/3)) of its single-candidate delays, at least
  :attr:`NestingParams.min_bin_width_ns`.
- *Ties* (equal best scores, including no learned data at all) go to the candidate with the
  smallest delay: the parent call that arrived last before the child left, then the lower row.
- *Pattern shape.* A call's shape is its callee's name with its children's shapes in
  parentheses; children are ordered by departure on the caller's clock and grouped into
  concurrent groups (a child joins the current group while it leaves before every earlier child
  of the group has returned). Groups are joined by ``", "``, members of a group by ``" | "``
  (sorted, so that the order in which parallel calls happened to leave does not split a
  pattern). A pattern is ``"<root caller> -> <shape of root call>"``, e.g.
  ``"client -> web(app(db) | cache, auth)"``.

Everything is vectorized with numpy (sorting, ``searchsorted`` and run-length tricks) except the
bottom-up building of shapes for calls that have children, a loop over those calls only. The
candidate pairs are materialized, so memory grows with the number of (child, enclosing parent)
pairs, i.e. with the concurrency at each node, and so does the time (``bench/bench_paths.py``
measures it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from tacit.errors import ConfigError
from tacit.model.messages import MISSING, MessageTable
from tacit.runs import run_bounds, run_heads, run_starts

CALL = 0
"""Role of a message that is a call with a return."""
RETURN = 1
"""Role of a message that is the return of a call."""
UNPAIRED = 2
"""Role of a message that could not be paired; see :attr:`NestingResult.unpaired_reason`."""

UNPAIRED_REASONS = (
    "no flow",
    "no timestamp",
    "no return: connection ends",
    "no return: next message on the connection goes the same way",
)
"""Why a message is unpaired; :attr:`NestingResult.unpaired_reason` indexes this tuple."""
_NO_FLOW, _NO_TIME, _ENDS, _SAME_WAY = range(4)

_MAX_BIN = (1 << 31) - 1
_DEPTH_LOOP_LIMIT = 256


@dataclass(frozen=True)
class NestingParams:
    """Parameters of :func:`nest_calls`.

    The paper (SOSP '03 §4) scores candidates with delay histograms but gives no bin width;
    the default picks one per child edge from the data.
    """

    bin_width_ns: int | None = None
    """Histogram bin width (ns) for every edge pair; ``None``: Freedman–Diaconis per child
    edge, from its single-candidate delays."""
    min_bin_width_ns: int = 1_000
    """Floor of the automatic width (1 µs: timestamps are rarely finer)."""
    resolve: Literal["delay", "latest"] = "delay"
    """``"delay"``: the paper's histogram scoring. ``"latest"``: a baseline that always takes
    the candidate that arrived last before the child left (the tie-break alone)."""

    def __post_init__(self) -> None:
        if self.bin_width_ns is not None and self.bin_width_ns <= 0:
            raise ConfigError(f"bin_width_ns must be positive, not {self.bin_width_ns}")
        if self.min_bin_width_ns <= 0:
            raise ConfigError(f"min_bin_width_ns must be positive, not {self.min_bin_width_ns}")
        if self.resolve not in ("delay", "latest"):
            raise ConfigError(f"resolve must be 'delay' or 'latest', not {self.resolve!r}")


@dataclass
class NestingResult:
    """What :func:`nest_calls` found; every array has one entry per message row.

    ``role`` is :data:`CALL`, :data:`RETURN` or :data:`UNPAIRED`. ``return_of`` gives a call's
    return row and ``call_of`` a return's call row (-1 elsewhere). ``parent_call`` is the row of
    a call's parent call (-1 for roots, returns and unpaired messages) and ``root_call`` the row
    of the root of its call tree (itself for a root). ``candidates`` counts the enclosing calls
    a call had at its caller (-1 where it could not be observed there, or for non-calls).
    ``unpaired_reason`` indexes :data:`UNPAIRED_REASONS` (-1 for paired messages).
    ``patterns`` maps each call path pattern to the number of trees of that shape, most
    frequent first; ``root_pattern`` gives, for a root call, the index of its pattern in
    ``list(patterns)`` (-1 elsewhere). ``unpaired`` counts messages per reason and ``stats``
    counts calls, returns, roots and how each call's parent was decided.
    """

    role: np.ndarray
    return_of: np.ndarray
    call_of: np.ndarray
    parent_call: np.ndarray
    root_call: np.ndarray
    candidates: np.ndarray
    unpaired_reason: np.ndarray
    patterns: dict[str, int]
    root_pattern: np.ndarray
    unpaired: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.role)

    def accounted(self) -> bool:
        """True when every message is a paired call, a paired return or unpaired with a reason."""
        total = self.stats["calls"] + self.stats["returns"] + sum(self.unpaired.values())
        return total == len(self.role)


def nest_calls(messages: MessageTable, params: NestingParams | None = None) -> NestingResult:
    """Pair calls with returns, nest calls inside calls and aggregate call path patterns
    (Project 5's nesting algorithm, SOSP '03 §4; see the module docstring)."""
    p = params or NestingParams()
    n = len(messages)
    role, return_of, reason = _pair(messages)
    call_of = np.full(n, -1, dtype=np.int64)
    calls = np.flatnonzero(role == CALL)
    call_of[return_of[calls]] = calls

    local_parent, ncand, decided = _nest(messages, calls, return_of[calls], p)
    local_parent = _break_cycles(local_parent, decided)

    parent_call = np.full(n, -1, dtype=np.int64)
    has_parent = local_parent >= 0
    parent_call[calls[has_parent]] = calls[local_parent[has_parent]]
    candidates = np.full(n, -1, dtype=np.int32)
    candidates[calls] = ncand

    local_root, depth = _roots(local_parent)
    root_call = np.full(n, -1, dtype=np.int64)
    root_call[calls] = calls[local_root]

    patterns, local_pattern = _patterns(messages, calls, return_of[calls], local_parent, depth)
    root_pattern = np.full(n, -1, dtype=np.int32)
    roots = local_parent < 0
    root_pattern[calls[roots]] = local_pattern[roots]

    unpaired = {r: int(np.count_nonzero(reason == i)) for i, r in enumerate(UNPAIRED_REASONS)}
    stats = {
        "messages": n,
        "calls": len(calls),
        "returns": len(calls),
        "unpaired": int(np.count_nonzero(role == UNPAIRED)),
        "roots": int(np.count_nonzero(roots)),
        **decided,
    }
    return NestingResult(
        role=role,
        return_of=return_of,
        call_of=call_of,
        parent_call=parent_call,
        root_call=root_call,
        candidates=candidates,
        unpaired_reason=reason,
        patterns=patterns,
        root_pattern=root_pattern,
        unpaired=unpaired,
        stats=stats,
    )


def _unique(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and their counts.

    By hand because ``np.unique`` finds distinct values through a hash set (numpy 2.3 and
    later), far slower than a sort on many distinct int64 timestamps.
    """
    s = np.sort(x)
    first, count = run_bounds(s)
    return s[first], count


# ---------------------------------------------------------------- step 1: pairing


def _pair(m: MessageTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # noqa: PLR0915
    """Roles, call -> return rows and unpaired reasons (step 1)."""
    n = len(m)
    role = np.full(n, UNPAIRED, dtype=np.int8)
    return_of = np.full(n, -1, dtype=np.int64)
    reason = np.full(n, -1, dtype=np.int8)
    reason[m.flow < 0] = _NO_FLOW

    rows = np.flatnonzero(m.flow >= 0)
    src = m.src[rows].astype(np.int64)
    dst = m.dst[rows].astype(np.int64)
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    from_lo = src == lo
    send, recv = m.send[rows], m.recv[rows]
    t_lo = np.where(from_lo, send, recv)  # stamped by the lower-coded node's clock
    t_hi = np.where(from_lo, recv, send)

    # connections: (flow, lo, hi); a flow is one connection, the node pair guards bad input
    flow = m.flow[rows]
    order = np.lexsort((hi, lo, flow))
    f, a, b = flow[order], lo[order], hi[order]
    new = run_heads(f, a, b)
    conn = np.empty(len(order), dtype=np.int64)
    conn[order] = np.cumsum(new) - 1
    nconn = int(conn.max()) + 1 if len(conn) else 0

    # order each connection by the clock of the side that stamped more of its messages
    has_lo = np.bincount(conn, weights=t_lo != MISSING, minlength=nconn)
    has_hi = np.bincount(conn, weights=t_hi != MISSING, minlength=nconn)
    use_lo = (has_lo >= has_hi)[conn]
    key = np.where(use_lo, t_lo, t_hi)
    key = np.where(key == MISSING, np.where(use_lo, t_hi, t_lo), key)
    timed = key != MISSING
    reason[rows[~timed]] = _NO_TIME

    rows, conn, key, from_lo = rows[timed], conn[timed], key[timed], from_lo[timed]
    order = np.lexsort((rows, key, conn))
    rows, conn, way = rows[order], conn[order], from_lo[order]
    k = len(rows)
    if k == 0:
        return role, return_of, reason

    # a message returns the previous one iff it goes the other way and the previous one is
    # not itself a return: within a run of alternating directions, every second message
    idx = np.arange(k)
    same_conn_prev = np.zeros(k, dtype=bool)
    same_conn_prev[1:] = conn[1:] == conn[:-1]
    brk = ~same_conn_prev
    brk[1:] |= way[1:] == way[:-1]
    start = np.maximum.accumulate(np.where(brk, idx, 0))
    is_ret = (idx - start) % 2 == 1
    next_ret = np.zeros(k, dtype=bool)
    next_ret[:-1] = is_ret[1:]
    is_call = ~is_ret & next_ret
    alone = ~is_ret & ~next_ret
    next_same_conn = np.zeros(k, dtype=bool)
    next_same_conn[:-1] = same_conn_prev[1:]

    role[rows[is_call]] = CALL
    role[rows[is_ret]] = RETURN
    return_of[rows[is_call]] = rows[np.flatnonzero(is_call) + 1]
    reason[rows[alone & next_same_conn]] = _SAME_WAY
    reason[rows[alone & ~next_same_conn]] = _ENDS
    return role, return_of, reason


# ---------------------------------------------------------------- steps 2-4: nesting


def _nest(
    m: MessageTable, calls: np.ndarray, rets: np.ndarray, p: NestingParams
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """The parent of each call (local indices, -1 for roots), its candidate counts, and how
    parents were decided (steps 2-4)."""
    c = len(calls)
    parent = np.full(c, -1, dtype=np.int64)
    ncand = np.full(c, -1, dtype=np.int32)
    caller = m.src[calls].astype(np.int64)
    callee = m.dst[calls].astype(np.int64)
    # at the caller: [send of call, recv of return]; at the callee: [recv of call, send of return]
    cs, ce = m.send[calls], m.recv[rets]
    ps, pe = m.recv[calls], m.send[rets]
    child_ok = (cs != MISSING) & (ce != MISSING)
    parent_ok = (ps != MISSING) & (pe != MISSING)
    ncand[child_ok] = 0
    decided = {
        "unobservable_children": int(np.count_nonzero(~child_ok)),
        "unobservable_parents": int(np.count_nonzero(~parent_ok)),
        "no_candidate": 0,
        "single_candidate": 0,
        "ambiguous": 0,
        "ambiguous_by_delay": 0,
        "ambiguous_by_tiebreak": 0,
        "cycles_broken": 0,
    }
    kids = np.flatnonzero(child_ok)
    pars = np.flatnonzero(parent_ok)
    if len(kids) == 0:
        return parent, ncand, decided

    # one sort key per (node, time): node-major, times replaced by their rank
    times, _ = _unique(np.concatenate([cs[kids], ps[pars], pe[pars]]))
    span = len(times) + 1
    kkey = caller[kids] * span + np.searchsorted(times, cs[kids])
    korder = np.argsort(kkey, kind="stable")
    kids, kkey = kids[korder], kkey[korder]
    lo = np.searchsorted(kkey, callee[pars] * span + np.searchsorted(times, ps[pars]), "left")
    hi = np.searchsorted(kkey, callee[pars] * span + np.searchsorted(times, pe[pars]), "right")

    # every (parent, child) with the child leaving inside the parent's interval
    cnt = hi - lo
    total = int(cnt.sum())
    pair_par = np.repeat(pars, cnt)
    first = np.repeat(np.cumsum(cnt) - cnt, cnt)
    pair_kid = kids[np.repeat(lo, cnt) + (np.arange(total) - first)]
    keep = (ce[pair_kid] <= pe[pair_par]) & (pair_kid != pair_par)
    pair_par, pair_kid = pair_par[keep], pair_kid[keep]

    per_kid = np.bincount(pair_kid, minlength=c)
    ncand[kids] = per_kid[kids]
    decided["no_candidate"] = int(np.count_nonzero(per_kid[kids] == 0))
    decided["single_candidate"] = int(np.count_nonzero(per_kid == 1))
    decided["ambiguous"] = int(np.count_nonzero(per_kid > 1))
    if len(pair_kid) == 0:
        return parent, ncand, decided

    delay = cs[pair_kid] - ps[pair_par]
    single = per_kid[pair_kid] == 1
    score = (
        _delay_scores(m, calls, pair_kid, pair_par, delay, single, p)
        if p.resolve == "delay"
        else np.zeros(len(pair_kid), dtype=np.int64)
    )

    # best candidate per child: highest score, then smallest delay, then lowest row
    order = np.lexsort((calls[pair_par], delay, -score, pair_kid))
    head = run_heads(pair_kid[order])
    best = order[head]
    parent[pair_kid[best]] = pair_par[best]

    # ambiguous children: decided by a strictly better score, or by the tie-break
    second = np.flatnonzero(head) + 1
    amb = per_kid[pair_kid[best]] > 1
    top = score[best[amb]]
    runner = score[order[second[amb]]]
    by_delay = (top > 0) & (top > runner)
    decided["ambiguous_by_delay"] = int(np.count_nonzero(by_delay))
    decided["ambiguous_by_tiebreak"] = int(np.count_nonzero(~by_delay))
    return parent, ncand, decided


def _delay_scores(
    m: MessageTable,
    calls: np.ndarray,
    pair_kid: np.ndarray,
    pair_par: np.ndarray,
    delay: np.ndarray,
    single: np.ndarray,
    p: NestingParams,
) -> np.ndarray:
    """For each candidate pair, how many single-candidate nestings share its (child edge,
    parent edge, delay bin)."""
    nodes = int(max(m.src.max(initial=0), m.dst.max(initial=0))) + 2
    edge_code = (m.src[calls].astype(np.int64) + 1) * nodes + (m.dst[calls] + 1)
    edges, _ = _unique(edge_code)
    edge = np.searchsorted(edges, edge_code)
    kid_edge = edge[pair_kid]
    pair_type_code = kid_edge * (int(edge.max()) + 1) + edge[pair_par]
    types, _ = _unique(pair_type_code)
    pair_type = np.searchsorted(types, pair_type_code)

    nedges = int(edge.max()) + 1
    if p.bin_width_ns is not None:
        width = np.full(nedges, p.bin_width_ns, dtype=np.int64)
    else:
        width = _fd_widths(kid_edge[single], delay[single], nedges, p.min_bin_width_ns)
    bins = np.minimum(delay // width[kid_edge], _MAX_BIN)
    key = (pair_type.astype(np.int64) << 31) | bins
    learned, counts = _unique(key[single])
    if len(learned) == 0:
        return np.zeros(len(key), dtype=np.int64)
    at = np.minimum(np.searchsorted(learned, key), len(learned) - 1)
    return np.where(learned[at] == key, counts[at], 0).astype(np.int64)


def _fd_widths(edge: np.ndarray, delay: np.ndarray, nedges: int, floor: int) -> np.ndarray:
    """Freedman–Diaconis bin width of each child edge's delays, at least ``floor``."""
    width = np.full(nedges, floor, dtype=np.int64)
    if len(edge) == 0:
        return width
    order = np.lexsort((delay, edge))
    e, d = edge[order], delay[order]
    starts = run_starts(e)
    ends = np.r_[starts[1:], len(e)]
    for s, t in zip(starts.tolist(), ends.tolist(), strict=True):
        k = t - s
        if k < 4:
            continue
        q1, q3 = np.quantile(d[s:t], [0.25, 0.75])
        fd = 2.0 * (q3 - q1) * k ** (-1.0 / 3.0)
        width[e[s]] = max(floor, int(fd))
    return width


# ---------------------------------------------------------------- call trees and patterns


def _break_cycles(parent: np.ndarray, decided: dict[str, int]) -> np.ndarray:
    """Cut parent links that close a cycle.

    Nesting within one clock cannot produce a cycle with causally consistent timestamps; this
    only guards against inconsistent input, and only runs when the depth walk does not end.
    """
    cur = parent.copy()
    for _ in range(_DEPTH_LOOP_LIMIT):
        live = cur >= 0
        if not live.any():
            return parent
        cur[live] = parent[cur[live]]
    parent = parent.copy()
    state = np.zeros(len(parent), dtype=np.int8)  # 0 unseen, 1 on the current walk, 2 done
    for s in np.flatnonzero(cur >= 0).tolist():
        walk = []
        v = s
        while v >= 0 and state[v] == 0:
            state[v] = 1
            walk.append(v)
            v = int(parent[v])
        if v >= 0 and state[v] == 1:  # closed a cycle: cut the link that closed it
            parent[walk[-1]] = -1
            decided["cycles_broken"] += 1
        state[walk] = 2
    return parent


def _roots(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Root and depth of every call in the forest ``parent``."""
    root = np.arange(len(parent))
    depth = np.zeros(len(parent), dtype=np.int64)
    cur = parent.copy()
    live = np.flatnonzero(cur >= 0)
    while len(live):
        root[live] = cur[live]
        depth[live] += 1
        cur[live] = parent[cur[live]]
        live = live[cur[live] >= 0]
    return root, depth


def _patterns(  # noqa: C901, PLR0915
    m: MessageTable, calls: np.ndarray, rets: np.ndarray, parent: np.ndarray, depth: np.ndarray
) -> tuple[dict[str, int], np.ndarray]:
    """Call path patterns with counts, and the pattern index of each root (local indices)."""
    c = len(calls)
    callee = m.dst[calls]
    cs, ce = m.send[calls], m.recv[rets]

    # children of each call, contiguous and ordered by departure on the caller's clock
    kids = np.flatnonzero(parent >= 0)
    kids = kids[np.lexsort((cs[kids], parent[kids]))]
    kid_parent = parent[kids]
    nkids = np.bincount(kid_parent, minlength=c)
    first = np.cumsum(nkids) - nkids

    # a shape is (callee code + 1, groups of child shapes); a shape's children are always
    # interned before it, so shape ids are a topological order
    shapes: dict[tuple, int] = {}
    shape_list: list[tuple] = []

    def intern(key: tuple) -> int:
        sid = shapes.get(key)
        if sid is None:
            sid = shapes[key] = len(shape_list)
            shape_list.append(key)
        return sid

    node = callee.astype(np.int64) + 1  # 0 is an absent name
    lut = np.zeros(int(node.max(initial=0)) + 1, dtype=np.int64)
    for v in _unique(node)[0].tolist():
        lut[v] = intern((v, ()))
    shape = lut[node]

    leaves = nkids == 0
    inner = np.flatnonzero(~leaves)
    inner = inner[np.argsort(-depth[inner], kind="stable")]
    kid_l, cs_l, ce_l = kids.tolist(), cs.tolist(), ce.tolist()
    node_l, first_l, nkids_l = node.tolist(), first.tolist(), nkids.tolist()
    for v in inner.tolist():
        groups: list[tuple[int, ...]] = []
        group: list[int] = []
        group_end = 0
        s = first_l[v]
        for j in range(s, s + nkids_l[v]):
            k = kid_l[j]
            if group and cs_l[k] >= group_end:  # every earlier child has returned
                groups.append(tuple(sorted(group)))
                group = []
            group_end = max(group_end, ce_l[k]) if group else ce_l[k]
            group.append(int(shape[k]))
        groups.append(tuple(sorted(group)))
        shape[v] = intern((node_l[v], tuple(groups)))

    def name(code: int) -> str:
        return (m.strings[code - 1] if code > 0 else None) or "?"

    rendered: list[str] = []
    for code, groups in shape_list:  # topological: children are rendered already
        text = name(code)
        if groups:
            inside = ", ".join(" | ".join(sorted(rendered[k] for k in g)) for g in groups)
            text = f"{text}({inside})"
        rendered.append(text)

    roots = np.flatnonzero(parent < 0)
    base = len(shape_list)
    pattern_code = (m.src[calls[roots]].astype(np.int64) + 1) * base + shape[roots]
    codes, counts = _unique(pattern_code)
    inverse = np.searchsorted(codes, pattern_code)
    rank = np.argsort(-counts, kind="stable")
    position = np.empty(len(codes), dtype=np.int32)
    position[rank] = np.arange(len(codes), dtype=np.int32)
    patterns: dict[str, int] = {}
    for i in rank.tolist():
        caller, sid = divmod(int(codes[i]), base)
        patterns[f"{name(caller)} -> {rendered[sid]}"] = int(counts[i])
    local_pattern = np.full(c, -1, dtype=np.int32)
    local_pattern[roots] = position[inverse]
    return patterns, local_pattern

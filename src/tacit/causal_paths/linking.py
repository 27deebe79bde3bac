"""WAP5 message linking (Reynolds et al., WWW '06, §5.1): which received message caused each send.

For a message *i* sent by node B to node C, every message *j* that B received from some node A
within ``window_ns`` (x) before sending *i* is a possible cause, at the causal delay
``d = send_i − recv_j`` (both on B's clock, so clock offsets never enter). WAP5 (§5.1, step 1)
models the causal delay of each B→C pair as exponential with the pair's mean delay, estimated
from the trace itself: over the B→C messages, the mean delay from the latest message into B
that preceded each (within x; none: spontaneous, not counted). A pair never seen so gets x as
its mean, the flattest weight. A cause's weight is the exponential density at its delay,
``w = λ·exp(−λ·d)`` with ``λ = 1/mean`` (step 2; the paper writes ``exp(−λ·d)``, the same
after normalizing since one pair's candidates share λ). The message may also be spontaneous
(sent on B's own initiative); that alternative weighs as a cause at ``y`` (``spontaneous_factor``)
mean delays. Weights are normalized into the probabilities of each possible cause and of
spontaneity.

A variant (``delay_model="triple"``) keeps one mean per
(A, B, C) triple, over the B→C messages whose latest preceding receipt came from A, so that a
node whose calls to C follow requests from two callers at different delays gets two rates; its
spontaneity weighs in the triple of the heaviest candidate. :func:`latest_links` is the trivial
rule WAP5 must beat: the cause is the latest message the sender received.

Untraced nodes (§5.1): a node that left no log is visible only through its peers. Only the
pattern A→B→A is inferred there: a message from an untraced B to A can be caused only by a
message from A to B, at the delay ``recv_i − send_j`` (both on A's clock). Where the connection
(``flow``) is known, the cause must be the previous message of the same connection, and a
message that opens a connection from an untraced node (a client's request) is spontaneous.

Candidates are gathered per message as a range of one time-sorted array of events (numpy);
weighing, normalizing and choosing run in one compiled pass over them (numba), so the pairs are
never materialized: per message at most ``max_causes`` most recent candidates are weighed (a
guard: with exponential weights older ones carry negligible probability), and only links at
least ``keep_probability`` likely are kept (path building drops the less likely ones anyway).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from tacit.compiled import grown
from tacit.errors import ConfigError
from tacit.model.messages import MISSING, MessageTable
from tacit.runs import distinct

NS = 1_000_000_000
WEIGH_BATCH = 1 << 18
"""Messages whose links are weighed at a time (bounds the links' output buffers)."""


DELAY_MODELS = ("pair", "triple")


@dataclass(frozen=True)
class LinkParams:
    """Parameters of message linking. The defaults are WAP5 §5.1's, which tacit recommends:
    per-triple delay models find no more of the true path patterns than the paper's per-pair
    ones, and on a DHT far fewer (``bench/bench_wap5_reproduction.py`` scores both).
    :meth:`published` returns them too, as every parameters class's does."""

    window_ns: int = 2 * NS
    """x: how long before a send a received message can still have caused it (ns). WAP5 §5.1
    uses 2 s for its wide-area traces (CoDeeN, Coral) and 100 ms for a LAN trace (Slurpee):
    "longer than the longest real delay in the trace"."""
    spontaneous_factor: float = 4.0
    """y: spontaneity weighs as a cause ``y`` mean delays back (WAP5 §5.1: y = 4)."""
    delay_model: str = "pair"
    """One exponential per B→C pair (``pair``, WAP5 §5.1) or per (A, B, C) triple
    (``triple``, tacit's; module docstring)."""
    max_causes: int = 64
    """Most recent candidate causes weighed per message (a guard; see the module docstring)."""
    min_mean_delay_ns: int = 1_000
    """Floor of a mean causal delay (1 µs), so that coarse timestamps (many zero delays) still
    give a finite rate."""
    keep_probability: float = 0.01
    """Links less likely than this are not kept. Path building drops every link up to its
    probably-false threshold (0.1), so this must stay below that."""

    def __post_init__(self) -> None:
        if self.delay_model not in DELAY_MODELS:
            raise ConfigError(
                f"delay_model must be one of {DELAY_MODELS}, got {self.delay_model!r}"
            )
        if isinstance(self.window_ns, bool) or not isinstance(self.window_ns, int | np.integer):
            raise ConfigError(f"window_ns must be an integer (ns), got {self.window_ns!r}")
        if not self.window_ns > 0 or not self.spontaneous_factor > 0:
            raise ConfigError("window_ns and spontaneous_factor must be positive")

    @classmethod
    def published(cls, **overrides) -> LinkParams:
        """WAP5 §5.1's: x = 2 s, y = 4, one delay model per sender→receiver pair."""
        return cls(**overrides)


@dataclass
class Links:
    """Possible causes of every message, with probabilities.

    Pairs ``cause[k] → effect[k]`` with ``prob[k]`` and ``delay[k]`` (ns), sorted by effect and,
    within an effect, from the most recent cause; only pairs at least ``keep_probability``
    likely. ``candidates[i]`` counts every possible cause weighed for message ``i``;
    ``spontaneous[i]`` is the probability that it had no cause among the traced messages;
    ``best[i]`` the most likely cause (-1: spontaneous).
    """

    cause: np.ndarray
    effect: np.ndarray
    prob: np.ndarray
    delay: np.ndarray
    candidates: np.ndarray
    spontaneous: np.ndarray
    best: np.ndarray
    mean_delay: dict[tuple[str, str, str], float]
    """Estimated mean causal delay (ns) per (from, at, to) node triple; from is "*" when the
    delay model is per pair."""


def link_messages(messages: MessageTable, params: LinkParams | None = None) -> Links:
    """Link every message to its possible causes (WAP5 §5.1); see the module docstring."""
    p = params or LinkParams()
    window = p.window_ns
    ev_msg, ev_time, lo, hi, t_eff = _candidates(messages, window)
    src, dst = messages.src, messages.dst  # int32; products widen to int64 where it matters
    ev_from = src[ev_msg]
    m = max(int(max(src.max(initial=0), dst.max(initial=0))) + 1, 1)

    # Mean delay per triple (A, B, C): over the B→C sends whose latest preceding receipt came
    # from A, the delay from that receipt.
    latest, latest_delay = _latest(lo, hi, ev_msg, ev_time, t_eff)
    has = latest >= 0
    per_pair = p.delay_model == "pair"
    first = np.zeros(int(has.sum()), np.int64) if per_pair else src[latest[has]].astype(np.int64)
    triple = (first * m + src[has]) * m + dst[has]
    t_keys, t_inv = np.unique(triple, return_inverse=True)
    t_mean = np.bincount(t_inv, weights=latest_delay[has]) / np.maximum(np.bincount(t_inv), 1)
    t_mean = np.maximum(t_mean, p.min_mean_delay_ns)
    table_keys, table_mean = _hash_table(t_keys, t_mean)

    n = len(messages)
    candidates = np.zeros(n, np.int32)
    spontaneous = np.ones(n, np.float64)
    best = np.full(n, -1, np.int64)
    parts = []
    # The links of a batch are copied out at their size (one empty batch when there are none).
    for e0 in range(0, max(n, 1), WEIGH_BATCH):
        found = _weigh(
            e0, min(e0 + WEIGH_BATCH, n), lo, hi, ev_msg, ev_time, ev_from, t_eff, src, dst, m,
            table_keys, table_mean, float(window), p.spontaneous_factor, p.max_causes,
            p.keep_probability, per_pair, candidates, spontaneous, best,
        )  # fmt: skip
        parts.append([a.copy() for a in found])
    cause, effect, prob, delay = (np.concatenate(c) for c in zip(*parts, strict=True))
    names = messages.strings.values
    mean_delay = {}
    for key, value in zip(t_keys.tolist(), t_mean.tolist(), strict=True):
        a, rest = divmod(key, m * m)
        b, c = divmod(rest, m)
        mean_delay[("*" if per_pair else names[a], names[b], names[c])] = value
    return Links(cause, effect, prob, delay, candidates, spontaneous, best, mean_delay)


def latest_links(messages: MessageTable, params: LinkParams | None = None) -> Links:
    """The trivial rule WAP5 must beat: each message's cause is the latest message its sender
    received within x before sending it (for an untraced sender, the latest possible cause of
    :func:`link_messages`), with probability 1; none within x: spontaneous. ``candidates``
    is 1 for a message with a cause, 0 otherwise: the rule weighs nothing else."""
    p = params or LinkParams()
    ev_msg, ev_time, lo, hi, t_eff = _candidates(messages, p.window_ns)
    latest, delay = _latest(lo, hi, ev_msg, ev_time, t_eff)
    has = np.flatnonzero(latest >= 0)
    return Links(
        cause=latest[has].astype(np.int32),
        effect=has.astype(np.int32),
        prob=np.ones(len(has)),
        delay=delay[has].astype(np.int64),
        candidates=(latest >= 0).astype(np.int32),
        spontaneous=(latest < 0).astype(np.float64),
        best=latest,
        mean_delay={},
    )


def _candidates(
    messages: MessageTable, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every message's possible causes as a range ``lo[i]:hi[i]`` of one array of events
    (``ev_msg``, at ``ev_time``), oldest first; and the time of each message on the clock its
    causes' times are on (``t_eff``: the send, or the receipt when the sender is untraced)."""
    n = len(messages)
    send, recv = messages.send, messages.recv
    src, dst = messages.src, messages.dst
    m = int(max(src.max(initial=0), dst.max(initial=0))) + 1
    lo = np.zeros(n, dtype=np.int32)  # message indices and event positions fit in int32
    hi = np.zeros(n, dtype=np.int32)
    msgs, times = [], []
    # Traced senders: the receipts at the sender within the window before the send.
    got = np.flatnonzero(recv != MISSING)
    sent = np.flatnonzero(send != MISSING)
    order, a, b = _window_ranges(dst[got], recv[got], src[sent], send[sent], window)
    msgs.append(got[order])
    times.append(recv[got[order]])
    lo[sent], hi[sent] = a, b
    offset = len(order)
    # Untraced senders B answering A: only earlier messages A→B.
    back = np.flatnonzero((send == MISSING) & (recv != MISSING))
    flowed = messages.flow[back] >= 0
    # Known connections: the previous message of the same flow, when it went the other way; a
    # message opening its flow (or following one the same way) is spontaneous.
    f_rows = back[flowed]
    prev = _previous_on_flow(messages, f_rows)
    ok = prev >= 0
    ok[ok] = (src[prev[ok]] == dst[f_rows[ok]]) & (dst[prev[ok]] == src[f_rows[ok]])
    ok[ok] &= send[prev[ok]] != MISSING
    msgs.append(prev[ok])
    times.append(send[prev[ok]])
    lo[f_rows[ok]] = offset + np.arange(ok.sum())
    hi[f_rows[ok]] = lo[f_rows[ok]] + 1
    offset += int(ok.sum())
    # Unknown connections: every A→B message within the window before the receipt, on A's clock.
    nf = back[~flowed]
    order, a, b = _window_ranges(
        src[sent].astype(np.int64) * m + dst[sent],
        send[sent],
        dst[nf].astype(np.int64) * m + src[nf],
        recv[nf],
        window,
    )
    msgs.append(sent[order])
    times.append(send[sent[order]])
    lo[nf], hi[nf] = a + offset, b + offset
    t_eff = np.where(send != MISSING, send, recv)
    return np.concatenate(msgs).astype(np.int32), np.concatenate(times), lo, hi, t_eff


def _window_ranges(
    in_key: np.ndarray, in_time: np.ndarray, out_key: np.ndarray, out_time: np.ndarray, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort the in-events by (key, time); for each out-event, the range ``lo:hi`` of that order
    holding the in-events of its key with ``out_time − window ≤ in_time ≤ out_time``."""
    empty = np.empty(0, np.int64)
    if not len(in_key) or not len(out_key):
        zeros = np.zeros(len(out_key), np.int64)
        return empty, zeros, zeros
    # One sortable int64 per event: the key's rank, then the time's rank among every time the
    # search compares (ranks keep the order, and any times fit: a capture may span decades).
    start = np.maximum(out_time, np.iinfo(np.int64).min + window) - window
    times = distinct(np.concatenate([in_time, out_time, start]))
    span = len(times)
    keys = distinct(np.concatenate([in_key, out_key]))
    in_comp = np.searchsorted(keys, in_key) * span + np.searchsorted(times, in_time)
    order = np.argsort(in_comp, kind="stable")
    in_comp = in_comp[order]
    out_key_at = np.searchsorted(keys, out_key) * span
    hi = np.searchsorted(in_comp, out_key_at + np.searchsorted(times, out_time), side="right")
    lo = np.searchsorted(in_comp, out_key_at + np.searchsorted(times, start), side="left")
    return order, lo, hi


def _previous_on_flow(messages: MessageTable, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``: the message before it on its flow (by the flow's order of
    messages, taken from the time at its traced end), -1 for the first."""
    flowed = np.flatnonzero(messages.flow >= 0)
    # The time a flow's messages are ordered by: the send time, or the receive time when the
    # sender is untraced (both are on the traced peer's clock).
    t = np.where(messages.send[flowed] != MISSING, messages.send[flowed], messages.recv[flowed])
    order = flowed[np.lexsort((t, messages.flow[flowed]))]
    pos = np.empty(len(messages), dtype=np.int64)
    pos[order] = np.arange(len(order))
    k = pos[rows]
    prev = np.where(k > 0, order[np.maximum(k - 1, 0)], -1)
    same = prev >= 0
    same[same] = messages.flow[prev[same]] == messages.flow[rows[same]]
    return np.where(same, prev, -1)


@numba.njit(cache=True)
def _latest(lo, hi, ev_msg, ev_time, t_eff):  # pragma: no cover - compiled
    """Per message: its most recent possible cause other than itself (-1: none), and the delay."""
    n = len(lo)
    latest = np.full(n, -1, np.int64)
    delay = np.zeros(n, np.float64)
    for e in range(n):
        for k in range(hi[e] - 1, lo[e] - 1, -1):
            if ev_msg[k] != e:
                latest[e] = ev_msg[k]
                delay[e] = t_eff[e] - ev_time[k]
                break
    return latest, delay


def _hash_table(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An open-addressing table (linear probing, power-of-two size, -1 = empty) of the
    non-negative int64 ``keys``, for O(1) look-ups from compiled code (:func:`_find`)."""
    size = 1 << max(int(2 * len(keys)).bit_length(), 4)
    table_keys = np.full(size, -1, np.int64)
    table_values = np.zeros(size, np.float64)
    _fill_table(keys, values, table_keys, table_values)
    return table_keys, table_values


@numba.njit(cache=True)
def _slot(key, size):  # pragma: no cover - compiled
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(h >> np.uint64(40)) & (size - 1)


@numba.njit(cache=True)
def _fill_table(keys, values, table_keys, table_values):  # pragma: no cover - compiled
    size = len(table_keys)
    for i in range(len(keys)):
        s = _slot(keys[i], size)
        while table_keys[s] != -1:
            s = (s + 1) & (size - 1)
        table_keys[s] = keys[i]
        table_values[s] = values[i]


@numba.njit(cache=True)
def _find(key, table_keys, table_values, default):  # pragma: no cover - compiled
    size = len(table_keys)
    s = _slot(key, size)
    while table_keys[s] != -1:
        if table_keys[s] == key:
            return table_values[s]
        s = (s + 1) & (size - 1)
    return default


@numba.njit(cache=True)
def _weigh(  # noqa: C901, PLR0915
    e0, e1, lo, hi, ev_msg, ev_time, ev_from, t_eff, src, dst, m, table_keys, table_mean,
    window, y, max_causes, keep, per_pair, candidates, spontaneous, best,
):  # pragma: no cover - compiled  # fmt: skip
    """Weigh, normalize and choose the causes of messages ``e0:e1`` (see the module
    docstring): fills their ``candidates``, ``spontaneous`` and ``best``; returns their links."""
    cap = max(2 * (e1 - e0), 16)
    cause = np.empty(cap, np.int32)
    effect = np.empty(cap, np.int32)
    prob = np.empty(cap, np.float64)
    delay = np.empty(cap, np.int64)
    log_w = np.empty(max_causes, np.float64)
    slot = np.empty(max_causes, np.int64)
    out = 0
    for e in range(e0, e1):
        c = 0
        top = -np.inf
        heavy_mean = 0.0
        base = src[e] * m + dst[e]
        last_from, mean, log_mean = -1, 1.0, 0.0
        for k in range(hi[e] - 1, lo[e] - 1, -1):  # most recent first
            if c == max_causes:
                break
            if ev_msg[k] == e:
                continue
            sender = 0 if per_pair else ev_from[k]
            if sender != last_from:  # causes from one node often come in runs
                last_from = sender
                mean = _find(last_from * m * m + base, table_keys, table_mean, window)
                log_mean = np.log(mean)
            w = -log_mean - (t_eff[e] - ev_time[k]) / mean
            if w > top:
                top, heavy_mean = w, mean
            log_w[c] = w
            slot[c] = k
            c += 1
        candidates[e] = c
        if c == 0:
            continue
        log_s = -np.log(heavy_mean) - y
        top = max(top, log_s)
        total = np.exp(log_s - top)
        for i in range(c):
            log_w[i] = np.exp(log_w[i] - top)  # from here on: the unnormalized weight
            total += log_w[i]
        p_s = np.exp(log_s - top) / total
        spontaneous[e] = p_s
        if out + c > cap:
            cap = 2 * (out + c)
            cause, effect = grown(cause, cap), grown(effect, cap)
            prob, delay = grown(prob, cap), grown(delay, cap)
        lead = p_s
        for i in range(c):
            q = log_w[i] / total
            k = slot[i]
            if q > lead:
                lead = q
                best[e] = ev_msg[k]
            if q >= keep:
                cause[out], effect[out], prob[out] = ev_msg[k], e, q
                delay[out] = t_eff[e] - ev_time[k]
                out += 1
    return cause[:out], effect[:out], prob[:out], delay[:out]

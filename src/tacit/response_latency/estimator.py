"""Pirate's response-latency estimator (arXiv 2505.14358, §3.3–3.4, Algorithms 1 and 2).

From the client-to-server packets of each connection (:mod:`~.flows`), the gaps that may
separate a response's arrival from the request it triggered (:mod:`~.gaps`, with the two §3.4
heuristics) give one estimate per connection per epoch:

- ``algorithm="threshold"`` (Algorithm 1): the mean of the candidate gaps longer than the gap
  threshold δ (and shorter than the idle gap).
- ``algorithm="modes"`` (Algorithm 2 as published, the default): every gap shorter than the
  idle gap goes into the connection's histogram of at most ``N`` ``(min, max, count, sum)``
  modes (:mod:`~.mode_sum`); the estimate is the proportional mode sum up to the inter-batch
  gap, the largest mode that is not a timer mode (:mod:`~.timers`) and, with the second §3.4
  heuristic, holds a gap after a non-MTU packet.
- ``algorithm="centres"`` (tacit's own variant, not the paper's): the
  candidate gaps go into a histogram of centre-tracking modes (:mod:`~.modes`); the estimate is
  the mean of the epoch's gaps in the modes centred at or above the floor that are not timer
  modes. The floor is δ, or (``PirateParams.mode_floor_ratio``) adaptive per connection; each
  epoch's floor becomes the connection's δ for telling bursts apart. With
  ``PirateParams.from_burst_start`` (:meth:`PirateParams.pipelining`) a gap is measured from
  the first packet of the burst before it (:func:`~.gaps.next_gap`).

:class:`StreamingEstimator` keeps every connection's state between batches; one compiled pass
over a batch, in time order, updates it. A connection's epoch closes when one of its packets
falls in a later epoch, when a batch ends past the epoch's end, or on :meth:`~StreamingEstimator.
flush`; :func:`estimate_response_latency` is the streaming estimator fed once and flushed, so
batch and streaming results agree. An epoch whose connection had no response gap gives no row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from tacit.compiled import grown
from tacit.errors import ConfigError
from tacit.formats.connections import (
    FORGET_NS,
    MIN_COMPACT,
    ConnectionRegistry,
    ConnectionTable,
)
from tacit.model.packets import NO_TIME, TCP, PacketTable
from tacit.response_latency.gaps import BUCKETS, NO_GAP, USED, next_gap, packet_kinds
from tacit.response_latency.mode_sum import (
    add_gap_published,
    close_epoch_published,
    mode_sum_arrays,
)
from tacit.response_latency.modes import MODE_DTYPES, add_gap, close_epoch
from tacit.response_latency.params import PirateParams
from tacit.response_latency.timers import timer_gaps_ns

ALGORITHMS = ("modes", "centres", "threshold")
MODE_SUM, CENTRES, THRESHOLD = range(len(ALGORITHMS))

_STATE_DTYPES = {
    "last_time": np.int64,
    "last_full": np.bool_,
    "full_size": np.int32,
    "high_seq": np.uint32,
    "seq_seen": np.bool_,
    "tainted": np.bool_,
    "burst_start": np.int64,
    "hole_lo": np.uint32,
    "hole_hi": np.uint32,
    "burst_gap": np.int64,
    "epoch": np.int64,
}


@dataclass
class ResponseAccounting:
    """Packets per bucket (:data:`~tacit.response_latency.gaps.BUCKETS`); the buckets partition
    the packets given to the estimator."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BUCKETS, 0))

    @property
    def packets(self) -> int:
        return sum(self.counts.values())

    def __add__(self, other: ResponseAccounting) -> ResponseAccounting:
        return ResponseAccounting({k: self.counts[k] + other.counts[k] for k in BUCKETS})

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)


@dataclass
class ResponseEstimates:
    """Estimates per connection per epoch, sorted by connection then epoch.

    Columns: ``connection`` (index into ``connections``), ``epoch_start`` / ``epoch_end`` (ns),
    ``latency_ns`` (the estimate) and ``samples`` (the gaps it rests on). ``connections``: every
    connection seen so far; ``used_packets`` and ``gap_samples``: per connection, packets used
    and gaps counted in estimates so far; ``discarded_gaps``: per connection, gaps Algorithm 2
    discarded so far because all ``N`` modes were live and none was near (0 for the other
    algorithms). ``accounting``: the packets of the batch(es) these estimates came from, by
    bucket.
    """

    connection: np.ndarray
    epoch_start: np.ndarray
    epoch_end: np.ndarray
    latency_ns: np.ndarray
    samples: np.ndarray
    connections: ConnectionTable
    used_packets: np.ndarray
    gap_samples: np.ndarray
    discarded_gaps: np.ndarray
    accounting: ResponseAccounting
    algorithm: str
    params: PirateParams

    def __len__(self) -> int:
        return len(self.connection)

    def as_rows(self) -> list[dict]:
        """One JSON-ready dict per estimate (client and server named)."""
        return [
            {
                "connection": int(c),
                "client": self.connections.client(int(c)),
                "server": self.connections.server(int(c)),
                "epoch_start_ns": int(s),
                "epoch_end_ns": int(e),
                "latency_ns": int(v),
                "samples": int(n),
            }
            for c, s, e, v, n in zip(
                self.connection,
                self.epoch_start,
                self.epoch_end,
                self.latency_ns,
                self.samples,
                strict=True,
            )
        ]


def concat_estimates(parts: list[ResponseEstimates]) -> ResponseEstimates:
    """The estimates of successive :meth:`StreamingEstimator.feed` / ``flush`` calls as one
    (connections and per-connection counts from the last part)."""
    if not parts:
        raise ValueError("no estimates to concatenate")
    last = parts[-1]
    cols = {
        k: np.concatenate([getattr(p, k) for p in parts])
        for k in ("connection", "epoch_start", "epoch_end", "latency_ns", "samples")
    }
    order = np.lexsort((cols["epoch_start"], cols["connection"]))
    accounting = sum((p.accounting for p in parts), ResponseAccounting())
    return ResponseEstimates(
        **{k: v[order] for k, v in cols.items()},
        connections=last.connections,
        used_packets=last.used_packets,
        gap_samples=last.gap_samples,
        discarded_gaps=last.discarded_gaps,
        accounting=accounting,
        algorithm=last.algorithm,
        params=last.params,
    )


class StreamingEstimator:
    """Pirate over a stream of packet batches (module docstring).

    ``feed`` batches in time order (each batch need not be sorted: it is sorted by time); it
    returns the estimates of the epochs that closed. ``flush`` closes the rest.
    """

    def __init__(
        self,
        params: PirateParams | None = None,
        server: str | None = None,
        algorithm: str = "modes",
        forget_ns: int = FORGET_NS,
        min_compact: int = MIN_COMPACT,
    ) -> None:
        if algorithm not in ALGORITHMS:
            raise ConfigError(f"unknown algorithm {algorithm!r}; expected one of {ALGORITHMS}")
        self.params = params or PirateParams()
        self.algorithm = algorithm
        self._code = ALGORITHMS.index(algorithm)
        self.registry = ConnectionRegistry(server, min_compact)
        self._timers = timer_gaps_ns(self.params)
        self._cap = 0
        self._state: dict[str, np.ndarray] = {}
        self._modes: dict[str, np.ndarray] = {}
        self._sums: dict[str, np.ndarray] = {}
        self._used = np.zeros(0, dtype=np.int64)
        self._samples = np.zeros(0, dtype=np.int64)
        self._grow(1024)
        self.forget_ns = forget_ns
        self._latest = NO_TIME

    @property
    def state_bytes_per_connection(self) -> int:
        """Bytes of state kept per connection, from the arrays that hold it: the flow key and how
        its direction was decided (:meth:`ConnectionRegistry.bytes_per_connection`), the gap
        state, and the histogram (``N`` modes) or Algorithm 1's epoch sum and count.
        Diagnostic counters (packets used, gaps counted) and the hash table's free slots are not
        counted."""
        own = sum(a.itemsize for a in self._state.values())
        algo = sum(a.nbytes for a in [*self._modes.values(), *self._sums.values()]) // self._cap
        return self.registry.bytes_per_connection + own + algo

    def feed(self, packets: PacketTable) -> ResponseEstimates:
        """Take one batch; the estimates of the epochs it closed."""
        conns = self.registry.assign(packets)
        self._grow(self.registry.count)
        kinds = packet_kinds(packets, conns, self.registry.excluded(), self.params)
        time = np.ascontiguousarray(packets.time)  # one compiled signature
        rows = np.flatnonzero(kinds == USED)
        if len(rows) > 1 and np.any(np.diff(time[rows]) < 0):
            rows = rows[np.argsort(time[rows], kind="stable")]
        p = self.params
        min_full = p.min_full_payload if p.batch_end_only else np.iinfo(np.int32).max
        s = self._state
        out = _run(
            rows,
            conns.row_connection,
            kinds,
            time,
            packets.payload_len,
            packets.seq,
            packets.proto == TCP,
            p.epoch_ns,
            p.from_burst_start,
            p.idle_gap_ns,
            min_full,
            p.merge_epsilon,
            p.mode_epsilon_ns,
            p.mode_epsilon_ratio,
            self._closing(),
            s["last_time"],
            s["last_full"],
            s["full_size"],
            s["high_seq"],
            s["seq_seen"],
            s["tainted"],
            s["burst_start"],
            s["hole_lo"],
            s["hole_hi"],
            s["burst_gap"],
            s["epoch"],
            _centre_arrays(self._modes),
            _sum_arrays(self._sums),
            self._used,
            self._samples,
        )
        counts = np.bincount(kinds, minlength=len(BUCKETS))
        valid = time[time != NO_TIME]
        # A batch without a time (none captured, say) moves no epoch's end: only flush closes all.
        closed = self._close(out, int(valid.max()) // p.epoch_ns) if len(valid) else out
        result = self._result(
            closed,
            ResponseAccounting({name: int(c) for name, c in zip(BUCKETS, counts, strict=True)}),
        )
        if len(valid):
            self._latest = max(self._latest, int(valid.max()))
            self._forget_quiet()
        return result

    def _forget_quiet(self) -> None:
        """Forget the connections with no open epoch and no packet used for ``forget_ns``
        (:meth:`~tacit.formats.connections.ConnectionRegistry.forget`): a live source then holds
        the state of the connections in use, not of every one it saw. One seen again starts
        anew, as after a pause longer than the idle gap it would."""
        s = self._state
        remap = self.registry.forget(
            lambda k: (s["epoch"][:k] >= 0) | (s["last_time"][:k] >= self._latest - self.forget_ns)
        )
        if remap is None:
            return
        kept = np.flatnonzero(remap >= 0)
        for held in (s, self._modes, self._sums if self._code == MODE_SUM else {}):
            for name, a in held.items():
                held[name] = a[kept]
        self._used, self._samples = self._used[kept], self._samples[kept]
        cap, self._cap = self._cap, len(kept)
        self._grow(cap)  # room again, the rows after the kept ones new

    def flush(self) -> ResponseEstimates:
        """Close every open epoch; their estimates."""
        empty = tuple(np.zeros(0, dtype=np.int64) for _ in range(4))
        return self._result(self._close(empty, None), ResponseAccounting())

    def _close(self, out: tuple, watermark: int | None) -> tuple:
        """Close the epochs that end before ``watermark`` (all when None) and add them to the
        ones the pass closed."""
        s = self._state
        limit = np.iinfo(np.int64).max if watermark is None else watermark
        more = _close_before(
            self.registry.count,
            limit,
            self._closing(),
            s["burst_gap"],
            s["epoch"],
            _centre_arrays(self._modes),
            _sum_arrays(self._sums),
            self._samples,
        )
        return tuple(np.concatenate([a, b]) for a, b in zip(out, more, strict=True))

    def _result(self, closed: tuple, accounting: ResponseAccounting) -> ResponseEstimates:
        conn, epoch, total, n = closed
        order = np.lexsort((epoch, conn))
        conn, epoch, total, n = conn[order], epoch[order], total[order], n[order]
        k = self.registry.count
        start = epoch * self.params.epoch_ns
        return ResponseEstimates(
            connection=conn,
            epoch_start=start,
            epoch_end=start + self.params.epoch_ns,
            latency_ns=total // np.maximum(n, 1),
            samples=n,
            connections=self.registry.table(),
            used_packets=self._used[:k].copy(),
            gap_samples=self._samples[:k].copy(),
            discarded_gaps=self._discarded(k),
            accounting=accounting,
            algorithm=self.algorithm,
            params=self.params,
        )

    def _closing(self) -> tuple:
        """What closing an epoch needs besides the histograms, in the order
        :func:`_close_one` unpacks it."""
        p = self.params
        return (
            self._code,
            p.gap_threshold_ns,
            self._timers,
            p.timer_tolerance,
            p.remove_timer_modes,
            p.mode_floor_ratio,
            p.ibg_min_share,
            p.ibg_spread_ratio,
            p.ibg_min_time_share,
        )

    def _discarded(self, k: int) -> np.ndarray:
        if self._code == MODE_SUM:
            return self._sums["discarded"][:k].astype(np.int64)
        return np.zeros(k, dtype=np.int64)

    def _grow(self, need: int) -> None:
        if need <= self._cap:
            return
        cap = max(need, 2 * self._cap)
        old = self._cap
        for name, t in _STATE_DTYPES.items():
            a: np.ndarray = np.zeros(cap, dtype=t)
            a[:old] = self._state.get(name, a[:0])
            self._state[name] = a
        self._state["last_time"][old:] = NO_TIME
        self._state["epoch"][old:] = -1
        self._state["burst_gap"][old:] = self.params.gap_threshold_ns
        n = self.params.max_modes
        if self._code == CENTRES:
            widths = dict.fromkeys(MODE_DTYPES, n)
        elif self._code == THRESHOLD:  # an epoch sum and count: a "mode" without centre or count
            widths = {"centre": 0, "count": 0, "epoch_count": 1, "epoch_sum": 1}
        else:
            widths = dict.fromkeys(MODE_DTYPES, 0)
        for name, t in MODE_DTYPES.items():
            a = np.zeros((cap, widths[name]), dtype=t)
            a[:old] = self._modes.get(name, a[:0])
            self._modes[name] = a
        if self._code == MODE_SUM or not self._sums:  # other algorithms: empty arrays
            rows = cap if self._code == MODE_SUM else 0
            for name, a in mode_sum_arrays(rows, n).items():
                a[: min(old, rows)] = self._sums.get(name, a[:0])
                self._sums[name] = a
        self._used = grown(self._used, cap)
        self._used[old:] = 0
        self._samples = grown(self._samples, cap)
        self._samples[old:] = 0
        self._cap = cap


def estimate_response_latency(
    packets: PacketTable,
    params: PirateParams | None = None,
    server: str | None = None,
    algorithm: str = "modes",
) -> ResponseEstimates:
    """Pirate's estimates for a whole capture: :class:`StreamingEstimator` fed once, flushed."""
    est = StreamingEstimator(params, server, algorithm)
    return concat_estimates([est.feed(packets), est.flush()])


@njit(cache=True)
def _emit(c, e, total, n, samples, k, oc, oe, ot, on):  # pragma: no cover - compiled
    """Output row ``k`` for connection ``c``'s closed epoch ``e`` when it has gaps (``n``);
    returns the next row and the (grown) output columns."""
    if n <= 0:
        return k, oc, oe, ot, on
    samples[c] += n
    if k == len(oc):
        oc, oe, ot, on = grown(oc, 2 * k), grown(oe, 2 * k), grown(ot, 2 * k), grown(on, 2 * k)
    oc[k], oe[k], ot[k], on[k] = c, e, total, n
    return k + 1, oc, oe, ot, on


def _centre_arrays(m: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """The centre-tracking histogram's arrays (Algorithm 1's sum and count among them)."""
    return m["centre"], m["count"], m["epoch_count"], m["epoch_sum"]


def _sum_arrays(h: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """Algorithm 2's arrays in the order the compiled functions take them."""
    return h["low"], h["high"], h["count"], h["total"], h["candidates"], h["live"], h["discarded"]


@njit(cache=True)
def _close_one(c, closing, centres, sums):  # pragma: no cover - compiled
    """Close connection ``c``'s epoch with the algorithm ``closing`` names: ``(sum, n,
    floor)``, the floor being the connection's δ from now on."""
    algo, floor, timers, tol, remove, ratio, min_share, spread, min_time_share = closing
    centre, count, ecount, esum = centres
    if algo == MODE_SUM:
        low, high, pcount, ptotal, pcand, live, _ = sums
        total, n = close_epoch_published(
            low, high, pcount, ptotal, pcand, live, c, timers, tol, remove, True, min_share,
            spread, min_time_share,
        )  # fmt: skip
        return total, n, floor
    if algo == CENTRES:
        return close_epoch(centre, count, ecount, esum, c, floor, timers, tol, remove, ratio)
    total, n = esum[c, 0], np.int64(ecount[c, 0])
    esum[c, 0] = 0
    ecount[c, 0] = 0
    return total, n, floor


@njit(cache=True)
def _run(
    rows,
    conn,
    kinds,
    time,
    payload,
    seq,
    is_tcp,
    epoch_ns,
    from_burst,
    idle,
    min_full,
    eps,
    mode_eps,
    mode_ratio,
    closing,
    last_time,
    last_full,
    full_size,
    high_seq,
    seq_seen,
    tainted,
    burst_start,
    hole_lo,
    hole_hi,
    burst_gap,
    epoch,
    centres,
    sums,
    used,
    samples,
):  # pragma: no cover - compiled
    """The per-packet pass over ``rows`` (the used packets, in time order); closed epochs out."""
    algo, floor = closing[0], closing[1]
    centre, count, ecount, esum = centres
    low, high, pcount, ptotal, pcand, live, discarded = sums
    k = 0
    oc = np.empty(64, dtype=np.int64)
    oe, ot, on = np.empty(64, np.int64), np.empty(64, np.int64), np.empty(64, np.int64)
    for i in rows:
        c = conn[i]
        t = time[i]
        kind, gap, candidate = next_gap(
            c,
            t,
            payload[i],
            seq[i],
            is_tcp[i],
            min_full,
            floor,
            burst_gap[c] if from_burst else 0,
            last_time,
            last_full,
            full_size,
            high_seq,
            seq_seen,
            tainted,
            burst_start,
            hole_lo,
            hole_hi,
        )
        kinds[i] = kind
        if kind != USED:
            continue
        used[c] += 1
        e = t // epoch_ns
        if epoch[c] != e:
            if epoch[c] >= 0:
                total, n, burst_gap[c] = _close_one(c, closing, centres, sums)
                k, oc, oe, ot, on = _emit(c, epoch[c], total, n, samples, k, oc, oe, ot, on)
            epoch[c] = e
        if gap == NO_GAP or gap >= idle:
            continue
        if algo == MODE_SUM:
            add_gap_published(
                low, high, pcount, ptotal, pcand, live, discarded, c, gap, mode_eps, mode_ratio,
                candidate,
            )  # fmt: skip
        elif not candidate:
            continue
        elif algo == CENTRES:
            add_gap(centre, count, ecount, esum, c, gap, eps)
        elif gap > floor:
            esum[c, 0] += gap
            ecount[c, 0] += 1
    return oc[:k], oe[:k], ot[:k], on[:k]


@njit(cache=True)
def _close_before(
    count_conns, limit, closing, burst_gap, epoch, centres, sums, samples
):  # pragma: no cover - compiled
    """Close the open epochs of every connection that end at or before epoch ``limit``."""
    k = 0
    oc = np.empty(64, dtype=np.int64)
    oe, ot, on = np.empty(64, np.int64), np.empty(64, np.int64), np.empty(64, np.int64)
    for c in range(count_conns):
        if epoch[c] < 0 or epoch[c] >= limit:
            continue
        total, n, burst_gap[c] = _close_one(c, closing, centres, sums)
        k, oc, oe, ot, on = _emit(c, epoch[c], total, n, samples, k, oc, oe, ot, on)
        epoch[c] = -1  # closed: the connection's next packet opens a new epoch
    return oc[:k], oe[:k], ot[:k], on[:k]

"""Slow, obvious reference versions of compiled kernels, written from the papers' text, for
the tests to compare the kernels against on random inputs (as stumpy's tests do)."""

from __future__ import annotations


def algorithm_2_naive(
    gaps: list[tuple[int, bool]], n_max: int, eps: int, ratio: float
) -> tuple[list[list[int]], int]:
    """Pirate's Algorithm 2 (§3.4, ``UpdateModes``) over one epoch's gaps ``(gap, after a
    non-MTU packet)``: the modes ``[min, max, count, sum, candidates]`` (ascending) as the epoch
    ends, and the gaps discarded. ε around a mode is ``max(eps, ratio · its max)``."""
    modes: list[list[int]] = []
    discarded = 0

    def epsilon(m: list[int]) -> int:
        return max(eps, int(ratio * m[1]))

    def consider_merge(i: int) -> None:
        """Merge modes ``i`` and ``i + 1`` when they come within ε of mode ``i``."""
        if 0 <= i < len(modes) - 1 and modes[i + 1][0] - modes[i][1] <= epsilon(modes[i]):
            a, b = modes[i], modes.pop(i + 1)
            modes[i] = [a[0], max(a[1], b[1]), a[2] + b[2], a[3] + b[3], a[4] + b[4]]

    for g, candidate in gaps:
        joined, at = False, len(modes)
        for i, m in enumerate(modes):
            if m[0] - epsilon(m) <= g <= m[1] + epsilon(m):
                m[2] += 1
                m[3] += g
                m[4] += candidate
                if g < m[0]:
                    m[0] = g
                    consider_merge(i - 1)
                elif g > m[1]:
                    m[1] = g
                    consider_merge(i)
                joined = True
                break
            if g < m[0]:
                at = i
                break
        if joined:
            continue
        if len(modes) >= n_max:
            discarded += 1
            continue
        modes.insert(at, [g, g, 1, g, int(candidate)])
    return modes, discarded


def proportional_mode_sum_naive(
    modes: list[list[int]],
    min_share: float,
    is_timer=lambda mean: False,
    candidates_only: bool = False,
    spread: float = 0.0,
    min_time_share: float = 0.0,
) -> tuple[int, int]:
    """Pirate's proportional mode sum (§3.3) over the modes of :func:`algorithm_2_naive`:
    ``(sum, n)``, the estimate being ``sum // n`` (``n`` 0: no inter-batch gap).

    De-noising drops the modes whose mean ``is_timer``; the IBG is the largest remaining mode
    that holds at least ``min_share`` of the epoch's gaps and, with ``candidates_only`` (the
    second §3.4 heuristic), a gap after a non-MTU packet. The estimate is
    Σ Pr(m_i)/Pr(IBG) · m_i over the remaining modes up to the IBG, i.e. their gaps' sum over
    the IBG's count; with ``spread`` > 0 (tacit), over the count of the IBG and of the modes
    below it with a gap after a non-MTU packet (when ``candidates_only``) and a mean of at least
    ``spread`` times the IBG's. With ``min_time_share`` (tacit), the IBG is the largest such
    mode whose counted gaps hold at least that share of the sum, or the largest when none
    does."""
    total = sum(m[2] for m in modes)
    kept = [m for m in modes if not is_timer(m[3] // m[2])]

    def ends(m: list[int]) -> bool:
        return m[4] > 0 or not candidates_only

    eligible = [i for i, m in enumerate(kept) if m[2] >= min_share * total and ends(m)]
    if not eligible:
        return 0, 0

    def sums(ibg: int) -> tuple[int, int, int]:
        floor = spread * (kept[ibg][3] // kept[ibg][2]) if spread > 0 else float("inf")
        counted = [kept[ibg]] + [m for m in kept[:ibg] if m[3] // m[2] >= floor and ends(m)]
        return (
            sum(m[3] for m in kept[: ibg + 1]),
            sum(m[2] for m in counted),
            sum(m[3] for m in counted),
        )

    for ibg in reversed(eligible):
        s, n, t = sums(ibg)
        if t >= min_time_share * s:
            return s, n
    return sums(eligible[-1])[:2]


def mode_sum_naive(
    gaps: list[int],
    n_max: int,
    eps: int,
    ratio: float,
    min_share: float,
    spread: float,
    min_time_share: float = 0.0,
) -> tuple[list[list[int]], int, int | None]:
    """Pirate's Algorithm 2 (§3.3–3.4) over one epoch's gaps, then the proportional mode sum.

    Returns the modes ``[min, max, count, sum]`` (ascending) as the epoch ends, the gaps
    discarded, and the estimate in ns (None without an inter-batch gap). ε around a mode is
    ``max(eps, ratio · its max)``; the inter-batch gap is the largest mode holding at least
    ``min_share`` of the epoch's gaps (and whose inter-batch gaps hold ``min_time_share`` of
    the time), with the modes ``spread`` below it; no timer or batch-end filtering.
    """
    modes, discarded = algorithm_2_naive([(g, True) for g in gaps], n_max, eps, ratio)
    s, n = proportional_mode_sum_naive(
        modes, min_share, spread=spread, min_time_share=min_time_share
    )
    return [m[:4] for m in modes], discarded, (s // n if n else None)


def synopsis_naive(positions, ident, time, id_check: bool, check32=None):
    """RDA's synopsis (ID xor, TS sum modulo 2^64, Δ, and sRDA's IDSH when ``id_check``) built
    packet by packet: each packet updates the buckets ``positions[:, i]`` names.

    ``check32``: the 32-bit identifier hash of IDSH (called with the identifier)."""
    n = int(positions.max()) + 1 if positions.size else 0
    idx, ts, count, check = [0] * n, [0] * n, [0] * n, [0] * n
    for i, (x, t) in enumerate(zip(ident.tolist(), time.tolist(), strict=True)):
        for p in positions[:, i].tolist():
            idx[p] ^= x
            ts[p] = (ts[p] + t) % 2**64
            count[p] += 1
            if id_check:
                check[p] ^= int(check32(x))
    return idx, ts, count, check


def climb_naive(parent: list[int]) -> tuple[list[int], list[int], bool]:
    """Each row's depth and topmost ancestor by walking up its parents one by one, and whether
    any walk met a row twice (a cycle; depths and ancestors are then meaningless)."""
    depth, root = [], []
    for i in range(len(parent)):
        seen, x = [i], i
        while parent[x] != -1:
            x = parent[x]
            if x in seen:
                return [], [], True
            seen.append(x)
        depth.append(len(seen) - 1)
        root.append(x)
    return depth, root, False


def pirate_naive(rows: list[dict], server: str, params) -> dict:
    """Pirate as published (arXiv 2505.14358, §3.3–3.4: Algorithm 2, the proportional mode sum
    per connection per epoch, both §3.4 heuristics, timer modes removed) over packets given as
    dicts (``t``, ``src``, ``dst`` as "ADDR:PORT", ``flags``, ``payload``, ``seq``, ``proto``;
    defaults ACK|PSH, 0, 0, TCP), ``server`` naming the server end, one connection at a time.

    Per client-to-server packet in time order: pure acknowledgements (and UDP datagrams of at
    most ``udp_ack_max_payload`` bytes) are coalesced away, SYN/FIN/RST without payload are
    control, TCP data ending at or before the highest byte so far is a retransmission (one more
    than δ after the last packet drops the next gap: it spans a timeout). Every other packet
    ends a gap since the previous one; the gap is a candidate when that previous packet was not
    full-size (its payload the connection's largest so far, at least ``min_full_payload``).
    A packet in a later epoch than the connection's current one closes it. Gaps of at least
    the idle gap are left out. Returns ``estimates`` {(proto, client, epoch start):
    (latency, samples)}, ``used`` and ``discarded`` per (proto, client), and ``buckets``
    (packets per bucket name)."""
    from tacit.model.packets import ACK, FIN, PSH, RST, SYN, TCP, UDP
    from tacit.response_latency.timers import timer_gaps_ns

    p = params
    timers = timer_gaps_ns(p).tolist()

    def is_timer(mean: int) -> bool:
        return p.remove_timer_modes and any(abs(mean - t) <= p.timer_tolerance * t for t in timers)

    buckets: dict[str, int] = {}
    flows: dict[tuple[int, str], list[dict]] = {}
    for r in sorted(rows, key=lambda r: r["t"]):  # stable: ties keep their order
        proto, payload = r.get("proto", TCP), r.get("payload", 0)
        flags = r.get("flags", ACK | PSH)
        if server not in (r["src"], r["dst"]):
            bucket = "not_server"
        elif r["src"] == server:
            bucket = "other_direction"
        elif payload < 0:
            bucket = "unknown_length"
        elif proto == TCP and payload == 0 and flags & (SYN | FIN | RST):
            bucket = "control"
        elif p.coalesce_acks and (
            (proto == TCP and payload == 0) or (proto == UDP and payload <= p.udp_ack_max_payload)
        ):
            bucket = "coalesced_ack"
        else:
            flows.setdefault((proto, r["src"]), []).append(r)
            continue
        buckets[bucket] = buckets.get(bucket, 0) + 1

    estimates: dict[tuple[int, str, int], tuple[int, int]] = {}
    used: dict[tuple[int, str], int] = {}
    discarded: dict[tuple[int, str], int] = {}

    def close(key: tuple[int, str], epoch: int, gaps: list[tuple[int, bool]]) -> None:
        modes, lost = algorithm_2_naive(gaps, p.max_modes, p.mode_epsilon_ns, p.mode_epsilon_ratio)
        discarded[key] += lost
        s, n = proportional_mode_sum_naive(
            modes,
            p.ibg_min_share,
            is_timer,
            p.batch_end_only,
            p.ibg_spread_ratio,
            p.ibg_min_time_share,
        )
        if n:
            estimates[(*key, epoch * p.epoch_ns)] = (s // n, n)

    for key, packets in flows.items():
        used[key] = discarded[key] = 0
        last_time = high = epoch = None
        last_full = tainted = False
        full_size = 0
        gaps: list[tuple[int, bool]] = []
        for r in packets:
            t, payload = r["t"], r.get("payload", 0)
            if key[0] == TCP and payload > 0:
                end = (r.get("seq", 0) + payload) % 2**32
                # Nothing past the highest byte so far (sequence numbers compare modulo 2^32).
                if high is not None and (end - high + 2**31) % 2**32 - 2**31 <= 0:
                    buckets["retransmission"] = buckets.get("retransmission", 0) + 1
                    if t - last_time > p.gap_threshold_ns:
                        tainted = True
                    continue
                high = end
            buckets["used"] = buckets.get("used", 0) + 1
            used[key] += 1
            gap = t - last_time if last_time is not None and not tainted else None
            candidate = not last_full
            full_size = max(full_size, payload)
            last_full = p.batch_end_only and payload >= full_size >= p.min_full_payload
            last_time, tainted = t, False
            if epoch != t // p.epoch_ns:
                if epoch is not None:
                    close(key, epoch, gaps)
                epoch, gaps = t // p.epoch_ns, []
            if gap is not None and gap < p.idle_gap_ns:
                gaps.append((gap, candidate))
        if epoch is not None:
            close(key, epoch, gaps)
    return {"estimates": estimates, "used": used, "discarded": discarded, "buckets": buckets}


def linking_naive(messages, params) -> dict:
    """WAP5's message linking (Reynolds et al., WWW '06, §5.1), message by message.

    Possible causes of a message *i* B→C: with B traced, every message into B received within
    x before *i* was sent, at delay ``send_i − recv_j``; with B untraced, only messages C→B:
    on a known connection the one before *i* on it (by time at the traced end), else every
    one sent within x before *i* was received, at ``recv_i − send_j`` (§5.1, untraced nodes).
    Most recent first (ties: the later message first), at most ``max_causes``.

    Step 1: the mean delay of each B→C pair (per (A, B, C) with ``delay_model="triple"``) is
    the mean delay from each B→C message's latest possible cause (A: its sender), floored at
    ``min_mean_delay_ns``; a pair never seen gets x. Step 2: a cause weighs the exponential
    density λ·exp(−λ·d), λ = 1/mean; spontaneity weighs as a cause ``y`` mean delays back, at
    the mean of the heaviest cause. Weights are normalized; the best cause is the most likely
    one, if more likely than spontaneity (the first in recency order among equals).

    Returns per message ``causes`` (``(j, delay)`` weighed), ``prob`` (their probabilities),
    ``spontaneous``, ``best`` (-1: spontaneous), ``latest`` (the latest possible cause, -1:
    none), and ``mean_delay`` {(A or "*", B, C): ns}.
    """
    import math

    from tacit.model.messages import MISSING

    p = params
    x = p.window_ns
    names = messages.strings.values
    src = [names[c] for c in messages.src.tolist()]
    dst = [names[c] for c in messages.dst.tolist()]
    send, recv, flow = messages.send.tolist(), messages.recv.tolist(), messages.flow.tolist()
    n = len(send)

    def at_end(j: int) -> int:
        """The time of message ``j`` at its traced end (its send when the sender is traced)."""
        return send[j] if send[j] != MISSING else recv[j]

    possible: list[list[tuple[int, int]]] = []  # (cause, delay), most recent first
    for i in range(n):
        found = []
        if send[i] != MISSING:
            for j in range(n):
                into_sender = j != i and dst[j] == src[i] and recv[j] != MISSING
                if into_sender and send[i] - x <= recv[j] <= send[i]:
                    found.append((recv[j], j, send[i] - recv[j]))
        elif recv[i] != MISSING and flow[i] >= 0:
            on_flow = sorted((at_end(j), j) for j in range(n) if flow[j] == flow[i])
            k = on_flow.index((at_end(i), i))
            if k > 0:
                j = on_flow[k - 1][1]
                if src[j] == dst[i] and dst[j] == src[i] and send[j] != MISSING:
                    found.append((send[j], j, recv[i] - send[j]))
        elif recv[i] != MISSING:
            for j in range(n):
                back = src[j] == dst[i] and dst[j] == src[i] and send[j] != MISSING
                if back and recv[i] - x <= send[j] <= recv[i]:
                    found.append((send[j], j, recv[i] - send[j]))
        found.sort(reverse=True)
        possible.append([(j, d) for _, j, d in found])

    triple = p.delay_model == "triple"
    delays: dict[tuple[str, str, str], list[int]] = {}
    for i in range(n):
        if possible[i]:
            j, d = possible[i][0]
            delays.setdefault((src[j] if triple else "*", src[i], dst[i]), []).append(d)
    mean_delay = {k: max(sum(v) / len(v), p.min_mean_delay_ns) for k, v in delays.items()}

    causes, prob, spontaneous, best = [], [], [], []
    for i in range(n):
        weighed = possible[i][: p.max_causes]
        causes.append(weighed)
        if not weighed:
            prob.append([])
            spontaneous.append(1.0)
            best.append(-1)
            continue
        means = [mean_delay.get((src[j] if triple else "*", src[i], dst[i]), x) for j, _ in weighed]
        log_w = [-math.log(m) - d / m for (_, d), m in zip(weighed, means, strict=True)]
        heaviest = max(range(len(weighed)), key=lambda k: (log_w[k], -k))
        log_s = -math.log(means[heaviest]) - p.spontaneous_factor
        top = max(*log_w, log_s)
        total = math.exp(log_s - top) + sum(math.exp(w - top) for w in log_w)
        prob.append([math.exp(w - top) / total for w in log_w])
        spontaneous.append(math.exp(log_s - top) / total)
        lead, choice = spontaneous[-1], -1
        for (j, _), q in zip(weighed, prob[-1], strict=True):
            if q > lead:
                lead, choice = q, j
        best.append(choice)
    latest = [c[0][0] if c else -1 for c in possible]
    return {
        "causes": causes,
        "prob": prob,
        "spontaneous": spontaneous,
        "best": best,
        "latest": latest,
        "mean_delay": mean_delay,
    }


def lagged_correlation_naive(cause, effect, max_lag: int):
    """YTrace rule mining's correlation filter on dense [template, unit, window] 0/1 arrays:
    per lag, each template's series over all units and the windows the lag leaves, centred
    and scaled to unit length (all zeros where constant), then their dot products; the
    largest over lags, and its lag."""
    import numpy as np

    def unit_length(x):
        x = x - x.mean(axis=1, keepdims=True)
        norm = np.sqrt((x * x).sum(axis=1, keepdims=True))
        return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)

    n_t, _, n_w = cause.shape
    best = np.full((n_t, n_t), -np.inf)
    lag_of = np.zeros((n_t, n_t), dtype=np.int64)
    for lag in range(min(max_lag, n_w - 1) + 1):
        a = unit_length(cause[:, :, : n_w - lag].reshape(n_t, -1).astype(np.float64))
        b = unit_length(effect[:, :, lag:].reshape(n_t, -1).astype(np.float64))
        c = a @ b.T
        better = c > best
        best[better] = c[better]
        lag_of[better] = lag
    return best, lag_of

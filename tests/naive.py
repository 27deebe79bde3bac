"""Slow, obvious reference versions of compiled kernels, written from the papers' text, for
the tests to compare the kernels against on random inputs (as stumpy's tests do)."""

from __future__ import annotations


def mode_sum_naive(
    gaps: list[int], n_max: int, eps: int, ratio: float, min_share: float
) -> tuple[list[list[int]], int, int | None]:
    """Pirate's Algorithm 2 (§3.3–3.4) over one epoch's gaps, then the proportional mode sum.

    Returns the modes ``[min, max, count, sum]`` (ascending) as the epoch ends, the gaps
    discarded, and the estimate in ns (None without an inter-batch gap). ε around a mode is
    ``max(eps, ratio · its max)``; the inter-batch gap is the largest mode holding at least
    ``min_share`` of the epoch's gaps; no timer or batch-end filtering.
    """
    modes: list[list[int]] = []
    discarded = 0

    def epsilon(m: list[int]) -> int:
        return max(eps, int(ratio * m[1]))

    def consider_merge(i: int) -> None:
        """Merge modes ``i`` and ``i + 1`` when they come within ε of mode ``i``."""
        if 0 <= i < len(modes) - 1 and modes[i + 1][0] - modes[i][1] <= epsilon(modes[i]):
            a, b = modes[i], modes.pop(i + 1)
            modes[i] = [a[0], max(a[1], b[1]), a[2] + b[2], a[3] + b[3]]

    for g in gaps:
        joined, at = False, len(modes)
        for i, m in enumerate(modes):
            if m[0] - epsilon(m) <= g <= m[1] + epsilon(m):
                m[2] += 1
                m[3] += g
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
        modes.insert(at, [g, g, 1, g])
    total = sum(m[2] for m in modes)
    ibg = next((i for i in reversed(range(len(modes))) if modes[i][2] >= min_share * total), None)
    if ibg is None:
        return modes, discarded, None
    return modes, discarded, sum(m[3] for m in modes[: ibg + 1]) // modes[ibg][2]


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

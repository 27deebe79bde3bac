"""The invertible synopsis of RDA and sRDA: ID xor, TS sum and Δ per bucket, and its decoder.

"Every Timestamp Counts: Accurate Tracking of Network Latencies using Reconcilable Difference
Aggregator" (RDA) replaces LDA's (timestamp sum, count) buckets by buckets that can be
*reconciled* (§IV, §V): each holds the XOR of the identifiers of its packets, the sum of their
timestamps and a count Δ, and every packet updates k buckets (§V-A: "(a) ID = ID ⊕ packet's
identifier; (b) TS = TS + packet's timestamp ...; (c) Δ = Δ + 1"). Subtracting one side's
synopsis from the other's (§V-B (i)) cancels every packet seen at both sides from the ID xor
and Δ fields — leaving only its delay in the TS field — while a packet seen at one side only
remains with Δ = ±1. Such packets are listed by peeling (Algorithm 1, §V-B (ii); the paper
builds on set reconciliation, its ref. [10], Eppstein et al., SIGCOMM '11, whose structure is
the invertible Bloom lookup table of Goodrich and Mitzenmacher, Allerton '11): a *pure* bucket
holds exactly one of them, whose identifier is then its ID xor; removing it from its k buckets
may make others pure.

Sign convention. The paper's conventions disagree: §IV-C subtracts sender from receiver and
calls Δ = 1 reordered, while Algorithm 1 lists Δ = 1 as lost. Here the receiver's synopsis is
subtracted from the sender's, so Δ = +1 is a packet seen only by the sender (lost, or late) and
Δ = −1 one seen only by the receiver (sent in another interval), as Algorithm 1 labels them.
Only the names of the signs change, not what is listed.

Two layouts, as the paper describes them:

* RDA (§V-A): k banks of m buckets in one array, bank j holding buckets ``[j·m, (j+1)·m)``,
  one bucket per bank per packet, picked by that bank's hash. A bucket is pure iff Δ = ±1 and
  its ID xor hashes, with that bank's hash, to this very bucket (§V-B, Algorithm 1 lines 5 and
  22: the bank-hash purity test), so no check field is needed. tacit departs from §VIII-B's
  bucket width of 64 · 3 = 192 bits: here 20 bytes (8 ID xor, 8 TS sum, 4 Δ; Δ is a 64-bit
  integer in the paper), which gives RDA more buckets at equal memory than the paper's width.
* sRDA (§IV-B): one table, k hashes per packet anywhere in it; purity is tested with a field,
  IDSH, the XOR of a hash H of each identifier (§IV-C: pure iff Δ = ±1 and H(ID) = IDSH).
  tacit departs twice. (1) §IV-B hashes a packet to "at most k different buckets" and updates
  each of these unique buckets once, so a packet whose hashes collide sits in fewer than k;
  here a position taken by an earlier hash moves to the next bucket, so that every packet sits
  in exactly k distinct buckets (either way no packet updates a bucket twice, which would
  cancel it there and let a mixed bucket pass as pure with the wrong sign). (2) §IV-D:
  "Removing this redundant field saves 25% space", i.e. IDSH is as wide as each of the other
  three fields; here IDSH is 32 bits (the usual IBLT check width), 24 bytes per bucket against
  the paper's 256 bits, which favours sRDA at equal memory.

Hashes are tacit's seeded splitmix64 (:mod:`~tacit.oneway_latency.identifiers`), not the Bob
hash of §VIII-A. Timestamp sums are kept modulo 2^64 (uint64 arithmetic wraps; §VIII-B uses a
64-bit fixed-point timestamp); only differences of sums are ever read, and they are exact while
the true sum of delays in a bucket is below 2^63 ns. Insertion and peeling are numba kernels: a
packet is k scattered updates, which numpy cannot express without materializing k·n positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from tacit.errors import ConfigError
from tacit.oneway_latency.identifiers import bank_hashes, bucket_of, check32, derive_seeds
from tacit.runs import contained, distinct

ID_BYTES = 8
TS_BYTES = 8
COUNT_BYTES = 4
CHECK_BYTES = 4


def bucket_bytes(banked: bool) -> int:
    """Bytes per bucket: ID xor, TS sum, Δ, and IDSH in the unbanked (sRDA) layout."""
    return ID_BYTES + TS_BYTES + COUNT_BYTES + (0 if banked else CHECK_BYTES)


def buckets_fitting(memory_bytes: int, tables: int, size: int, least: int, what: str) -> int:
    """How many buckets of ``size`` bytes per table ``tables`` tables get from
    ``memory_bytes`` (equal memory is how the methods are compared); at least ``least``."""
    per_table = memory_bytes // (tables * size)
    if per_table < least:
        raise ConfigError(f"{memory_bytes} bytes cannot hold {what}")
    return per_table


@dataclass(frozen=True)
class SynopsisLayout:
    """Shape of an invertible synopsis: ``buckets`` in total, ``k`` per packet; ``banked``
    (k banks, RDA, bank-hash purity) or not (k positions in one table, sRDA, IDSH purity)."""

    k: int
    buckets: int
    banked: bool
    seed: int = 0

    def __post_init__(self) -> None:
        if self.k < 1 or self.buckets < self.k:
            raise ConfigError(f"a synopsis needs k ≥ 1 and at least k buckets: {self}")
        if self.banked and self.buckets % self.k:
            raise ConfigError(f"{self.buckets} buckets do not divide into {self.k} banks")

    @property
    def id_check(self) -> bool:
        """Whether buckets carry IDSH (the unbanked layout needs it to test purity)."""
        return not self.banked

    @property
    def bytes_per_bucket(self) -> int:
        return bucket_bytes(self.banked)

    @property
    def memory_bytes(self) -> int:
        return self.buckets * self.bytes_per_bucket

    @property
    def modulus(self) -> int:
        """The range of each of the k hashes: the bank size, or the whole table."""
        return self.buckets // self.k if self.banked else self.buckets

    def positions(self, ident: np.ndarray) -> np.ndarray:
        """The k buckets of every identifier: shape ``(k, n)``. Banked: bank j's bucket is
        ``j · m + bank_hashes(...)[j]``. Unbanked: the k hashes into the whole table, a
        position already taken by an earlier hash moved to the next free bucket, so that the
        k positions are distinct (a packet twice in one bucket would cancel itself there)."""
        pos = bank_hashes(ident, self.k, self.modulus, self.seed)
        if self.banked:
            return pos + (np.arange(self.k, dtype=np.int64) * self.modulus)[:, None]
        _make_distinct(pos, self.modulus)
        return pos

    def _seeds(self) -> tuple[np.ndarray, np.uint64]:
        return derive_seeds(self.seed, "bank", self.k), derive_seeds(self.seed, "idsh")[0]


class Synopsis:
    """One side's synopsis of one interval (or the difference of two)."""

    def __init__(
        self,
        layout: SynopsisLayout,
        idx: np.ndarray,
        ts: np.ndarray,
        count: np.ndarray,
        check: np.ndarray,
    ) -> None:
        self.layout = layout
        self.idx = idx
        self.ts = ts
        self.count = count
        self.check = check

    @classmethod
    def empty(cls, layout: SynopsisLayout) -> Synopsis:
        n = layout.buckets
        return cls(
            layout,
            np.zeros(n, np.uint64),
            np.zeros(n, np.uint64),
            np.zeros(n, np.int32),
            np.zeros(n if layout.id_check else 0, np.uint32),
        )

    @classmethod
    def build(cls, layout: SynopsisLayout, ident: np.ndarray, time: np.ndarray) -> Synopsis:
        syn = cls.empty(layout)
        syn.insert(ident, time)
        return syn

    @property
    def memory_bytes(self) -> int:
        return self.layout.memory_bytes

    def insert(self, ident: np.ndarray, time: np.ndarray) -> None:
        """Add packets (identifier, timestamp ns) to their k buckets."""
        self._update(ident, time, 1)

    def delete(self, ident: np.ndarray, time: np.ndarray) -> None:
        """Remove packets that were inserted (or insert them with Δ = −1)."""
        self._update(ident, time, -1)

    def _update(self, ident: np.ndarray, time: np.ndarray, sign: int) -> None:
        seeds, check_seed = self.layout._seeds()
        _update(
            np.ascontiguousarray(ident, dtype=np.uint64),
            np.ascontiguousarray(time, dtype=np.int64).view(np.uint64),
            np.int32(sign),
            seeds,
            self.layout.modulus,
            self.layout.banked,
            check_seed,
            self.idx,
            self.ts,
            self.count,
            self.check,
        )

    def subtract(self, other: Synopsis) -> Synopsis:
        """``self − other``, bucket by bucket (ID xor and IDSH by XOR): the subtraction of
        §IV-C and §V-B (i)."""
        if other.layout != self.layout:
            raise ConfigError("cannot subtract synopses of different layouts")
        return Synopsis(
            self.layout,
            self.idx ^ other.idx,
            self.ts - other.ts,
            self.count - other.count,
            self.check ^ other.check,
        )

    def copy(self) -> Synopsis:
        return Synopsis(
            self.layout, self.idx.copy(), self.ts.copy(), self.count.copy(), self.check.copy()
        )

    def clean(self) -> np.ndarray:
        """Buckets of a difference that hold no unmatched packet: Δ = 0 and ID xor = 0."""
        mask = (self.count == 0) & (self.idx == 0)
        if self.layout.id_check:
            mask &= self.check == 0
        return mask


@dataclass(frozen=True)
class PeelResult:
    """What Algorithm 1 listed: distinct identifiers with Δ = +1 (sender only) or −1 (receiver
    only; the module docstring gives the sign convention), and those it listed more than
    once."""

    ids: np.ndarray
    signs: np.ndarray
    complete: bool
    """Every bucket ended with Δ = 0 and ID xor = 0 and nothing was listed twice: the whole
    difference was listed."""
    repeated: np.ndarray
    """Identifiers listed more than once: garbage from false pure buckets, never a packet (a
    packet is listed once). A false pure bucket can list garbage that then makes another
    bucket falsely pure with the other sign, and so on back and forth."""


def peel(
    difference: Synopsis, blocked: np.ndarray | None = None, local: np.ndarray | None = None
) -> PeelResult:
    """RDA Algorithm 1 (§V-B): list the packets of a subtracted synopsis by peeling pure
    buckets. Algorithm 1 lines 7–23: take a pure bucket, list its ID xor with its sign, remove
    it from its k buckets, and queue those that become pure; a queued bucket is tested again
    when taken, which covers line 9's check for a bucket emptied in the meantime.

    Works on a copy. At most one identifier per bucket can be listed, so a difference larger
    than that (or one the peeling cannot finish, its 2-core non-empty) ends incomplete; the
    caller must then treat the residual as undecoded. A bucket whose ID xor is in ``blocked``
    (identifiers already shown to be garbage from false pure buckets) is never taken as pure.

    ``local``: the sorted, distinct identifiers of the decoding side's own packets of the
    interval (the receiver's cache: RDA's receiver subtracts and decodes). A packet listed
    with Δ = −1 was seen by the receiver, so it must be among them; one with Δ = +1 was not.
    Checking this while peeling, rather than after, keeps a false pure bucket from listing
    garbage that would corrupt k other buckets. Neither check is in Algorithm 1, nor is the
    empty-bucket check of the bank-hash test (a true difference packet is in all its k buckets,
    none empty): tacit adds all three, see :mod:`~tacit.oneway_latency.rda` step 4.
    """
    residual = difference.copy()
    layout = difference.layout
    seeds, check_seed = layout._seeds()
    blocked = distinct(np.asarray([] if blocked is None else blocked, dtype=np.uint64))
    ids, signs, complete = _peel(
        residual.idx,
        residual.count,
        residual.check,
        seeds,
        layout.modulus,
        layout.banked,
        check_seed,
        layout.buckets,
        blocked,
        np.ascontiguousarray([] if local is None else local, dtype=np.uint64),
    )
    uniq, times = np.unique(ids, return_counts=True)
    repeated = uniq[times > 1]
    once = ~contained(ids, repeated)
    return PeelResult(ids[once], signs[once], bool(complete) and not len(repeated), repeated)


@njit(cache=True, inline="always")
def _distinct(taken, j, p, modulus):
    """``p`` moved forward (cyclically) past the positions ``taken[:j]``."""
    t = 0
    while t < j:
        if taken[t] == p:
            p = (p + 1) % modulus
            t = 0
        else:
            t += 1
    return p


@njit(cache=True, inline="always")
def _positions(x, seeds, modulus, banked, out):
    """The k buckets of ``x`` into ``out`` (see :meth:`SynopsisLayout.positions`)."""
    for j in range(seeds.size):
        p = bucket_of(x, seeds[j], modulus)
        out[j] = j * modulus + p if banked else _distinct(out, j, p, modulus)


@njit(cache=True)
def _make_distinct(pos, modulus):
    """Columns of k hashes (``bank_hashes``) made distinct in place, as ``_positions`` does."""
    for i in range(pos.shape[1]):
        for j in range(pos.shape[0]):
            pos[j, i] = _distinct(pos[:, i], j, pos[j, i], modulus)


@njit(cache=True)
def _update(ids, ts, sign, seeds, modulus, banked, check_seed, idx, tsum, count, check):
    has_check = check.size > 0
    pos = np.empty(seeds.size, dtype=np.int64)
    for i in range(ids.size):
        x = ids[i]
        t = ts[i]
        c = check32(x, check_seed) if has_check else np.uint32(0)
        _positions(x, seeds, modulus, banked, pos)
        for p in pos:
            idx[p] ^= x
            if sign > 0:
                tsum[p] += t
            else:
                tsum[p] -= t
            count[p] += sign
            if has_check:
                check[p] ^= c


@njit(cache=True, inline="always")
def _candidate(b, idx, count, check, seeds, modulus, check_seed):
    """The cheap part of the purity test: Δ = ±1 and RDA's bank-hash test (Algorithm 1 lines
    5 and 22: the ID xor hashes to this bucket in this bank), or sRDA's IDSH test (§IV-C) when
    the layout has the field."""
    c = count[b]
    if c != 1 and c != -1:
        return False
    x = idx[b]
    if check.size > 0:
        return check[b] == check32(x, check_seed)
    j = b // modulus
    return j * modulus + bucket_of(x, seeds[j], modulus) == b


@njit(cache=True, inline="always")
def _pure(b, idx, count, check, seeds, modulus, check_seed, blocked):
    """The whole purity test: :func:`_candidate`, none of the ID xor's buckets in the other
    banks empty (RDA), and the ID xor not blocked (the last two are tacit's). Run only on a
    bucket about to be peeled, whose k buckets the peeling then updates: the reads of the other
    banks are the ones the update needs anyway (a test of every candidate would read them at
    random, most of the cost)."""
    if not _candidate(b, idx, count, check, seeds, modulus, check_seed):
        return False
    x = idx[b]
    if check.size == 0:
        j = b // modulus
        for other in range(seeds.size):
            p = other * modulus + bucket_of(x, seeds[other], modulus)
            if other != j and count[p] == 0 and idx[p] == 0:
                return False
    return blocked.size == 0 or not _member(blocked, x)


@njit(cache=True, inline="always")
def _member(sorted_ids, x):
    at = np.searchsorted(sorted_ids, x)
    return at < sorted_ids.size and sorted_ids[at] == x


@njit(cache=True)
def _peel(idx, count, check, seeds, modulus, banked, check_seed, max_listed, blocked, local):  # noqa: C901
    k = seeds.size
    has_check = check.size > 0
    out_ids = np.empty(max_listed, dtype=np.uint64)
    out_signs = np.empty(max_listed, dtype=np.int8)
    stack = np.empty(idx.size + k * max_listed, dtype=np.int64)
    pos = np.empty(k, dtype=np.int64)
    top = 0
    for b in range(idx.size):
        if _candidate(b, idx, count, check, seeds, modulus, check_seed):
            stack[top] = b
            top += 1
    n = 0
    overflow = False
    while top > 0:
        top -= 1
        b = stack[top]
        if not _pure(b, idx, count, check, seeds, modulus, check_seed, blocked):
            continue
        x = idx[b]
        s = count[b]
        if local.size > 0 and _member(local, x) != (s == -1):
            continue  # checked last, on listing only: a binary search in the whole cache
        if n == max_listed:
            overflow = True
            break
        out_ids[n] = x
        out_signs[n] = s
        n += 1
        c = check32(x, check_seed) if has_check else np.uint32(0)
        _positions(x, seeds, modulus, banked, pos)
        for p in pos:
            idx[p] ^= x
            count[p] -= s
            if has_check:
                check[p] ^= c
            if _candidate(p, idx, count, check, seeds, modulus, check_seed):
                stack[top] = p
                top += 1
    complete = not overflow
    for b in range(idx.size):
        if count[b] != 0 or idx[b] != 0 or (has_check and check[b] != 0):
            complete = False
            break
    return out_ids[:n], out_signs[:n], complete

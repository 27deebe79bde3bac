"""Each call's top-K candidate parents (TraceWeaver §4.1: the K best mappings an incoming span
had), kept as columns.

A reconstruction of a million spans lists a few million (call, candidate parent, score)
entries. The online mode renumbers them to stream positions, holds them until the trace is
written, and numbers them back; a writer turns each call's into JSON. As columns, each of those
steps is a few array operations rather than a Python loop over every entry, and the mapping a
reader sees is made only when it is read (``bench/bench_serve_stages.py`` measures the online
reconstruction's cost a span).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tacit.runs import distinct, find_sorted, run_bounds, split_at

Pairs = list[tuple[int, float]]


@dataclass(frozen=True, eq=False)
class Alternatives(Mapping[int, Pairs]):
    """Entry ``i``: call ``owner[i]`` could have had parent ``parent[i]``, with ``score[i]``
    (the candidate's log-likelihood). A call's entries are adjacent, best first. As a mapping:
    call -> ``[(parent, score), ...]``, equal to a dict of the same lists."""

    owner: np.ndarray
    parent: np.ndarray
    score: np.ndarray

    @classmethod
    def empty(cls) -> Alternatives:
        return cls(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64))

    @classmethod
    def of(cls, lists: Mapping[int, Pairs]) -> Alternatives:
        """``lists`` as columns (itself when it is already)."""
        if isinstance(lists, Alternatives):
            return lists
        sizes = [len(pairs) for pairs in lists.values()]
        owner = np.repeat(np.fromiter(lists, np.int64, len(lists)), sizes)
        flat = [pair for pairs in lists.values() for pair in pairs]
        parent = np.array([p for p, _ in flat], dtype=np.int64)
        score = np.array([s for _, s in flat], dtype=np.float64)
        return cls(owner, parent, score)

    @classmethod
    def merged(cls, parts: Sequence[Alternatives]) -> Alternatives:
        """The entries of every part; a call that several list keeps the last one's, as
        ``dict.update`` in order would."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls.empty()
        owner = np.concatenate([a.owner for a in parts])
        part = np.repeat(np.arange(len(parts)), [len(a.owner) for a in parts])
        calls, which = np.unique(owner, return_inverse=True)
        last = np.zeros(len(calls), dtype=np.int64)
        np.maximum.at(last, which, part)
        keep = part == last[which]
        return cls(
            owner[keep],
            np.concatenate([a.parent for a in parts])[keep],
            np.concatenate([a.score for a in parts])[keep],
        )

    def where(self, keep: np.ndarray) -> Alternatives:
        """The entries where the boolean ``keep`` is True."""
        return Alternatives(self.owner[keep], self.parent[keep], self.score[keep])

    def renumbered(self, number: np.ndarray) -> Alternatives:
        """Calls and parents given by ``number[row]`` instead of their row."""
        return Alternatives(number[self.owner], number[self.parent], self.score)

    def parents(self, rows: np.ndarray, among: bool) -> np.ndarray:
        """The distinct candidate parents that are (``among``) or are not among ``rows``
        (ascending)."""
        listed = find_sorted(rows, self.parent) >= 0
        return distinct(self.parent[listed == among])

    def firsts(self) -> tuple[np.ndarray, np.ndarray]:
        """Each call listed and its best-scored parent."""
        starts, _ = run_bounds(self.owner)
        return self.owner[starts], self.parent[starts]

    @cached_property
    def _lists(self) -> dict[int, Pairs]:
        if not len(self.owner):
            return {}
        starts, _ = run_bounds(self.owner)
        pairs = list(zip(self.parent.tolist(), self.score.tolist(), strict=True))
        return dict(zip(self.owner[starts].tolist(), split_at(pairs, starts[1:]), strict=True))

    def __getitem__(self, call: int) -> Pairs:
        return self._lists[call]

    def __iter__(self) -> Iterator[int]:
        return iter(self._lists)

    def __len__(self) -> int:
        return len(self._lists)

"""The files of one table's blocks (:mod:`.store_blocks`) and which of them hold its rows.

A table's directory holds ``schema.parquet`` (no rows: the columns), a block per round
``<n>.parquet``, and blocks merged by the compaction, ``<a>-<b>.parquet``, each holding the
rows of the rounds ``a`` to ``b``; a merged block may be merged again with the ones beside it,
so merged ranges nest, and never overlap otherwise. Once a merged block is in place, the rounds
and merged blocks inside its range are read from it alone: their own files are left for a
while, for a reader that listed them just before, and then deleted. Numbers are zero-padded to
12 digits, so names sort by round.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_BLOCK = "schema.parquet"
"""An empty block of each table, written first, so that a view has a file to read and the
columns before any round is stored."""
_ROUND = re.compile(r"^(\d{12})\.parquet$")
_MERGED = re.compile(r"^(\d{12})-(\d{12})\.parquet$")


def round_name(n: int) -> str:
    return f"{n:012d}.parquet"


def merged_name(first: int, last: int) -> str:
    return f"{first:012d}-{last:012d}.parquet"


@dataclass
class TableFiles:
    """What one table's directory holds: ``rounds`` (number to file), ``merged`` (the range
    ``(a, b)`` to file)."""

    directory: Path
    rounds: dict[int, Path] = field(default_factory=dict)
    merged: dict[tuple[int, int], Path] = field(default_factory=dict)

    @classmethod
    def of(cls, directory: Path) -> TableFiles:
        files = cls(directory)
        for path in directory.iterdir():
            if m := _ROUND.match(path.name):
                files.rounds[int(m[1])] = path
            elif m := _MERGED.match(path.name):
                files.merged[(int(m[1]), int(m[2]))] = path
        return files

    def outer(self) -> list[tuple[int, int]]:
        """The merged ranges no other merged range holds, in order."""
        out: list[tuple[int, int]] = []
        for a, b in sorted(self.merged, key=lambda r: (r[0], -r[1])):
            if not out or b > out[-1][1]:
                out.append((a, b))
        return out

    def covered(self) -> list[Path]:
        """The files of the rounds and merged blocks that a merged block holds."""
        outer = self.outer()
        firsts = [a for a, _ in outer]

        def held(a: int, b: int) -> bool:
            i = bisect.bisect_right(firsts, a) - 1
            return i >= 0 and b <= outer[i][1]

        inner = [p for r, p in sorted(self.merged.items()) if r not in outer]
        return [*(p for n, p in sorted(self.rounds.items()) if held(n, n)), *inner]

    def uncovered(self) -> list[tuple[int, Path]]:
        """The rounds no merged block holds, in order, with their files."""
        covered = set(self.covered())
        return [(n, p) for n, p in sorted(self.rounds.items()) if p not in covered]

    def mergeable(self, most_rounds: int, count: int) -> list[tuple[int, int]]:
        """The first ``count`` merged ranges, side by side with no round between, of fewer
        than ``most_rounds`` rounds each; none when no such run is that long."""
        run: list[tuple[int, int]] = []
        for a, b in self.outer():
            if b - a + 1 >= most_rounds:
                run = []
                continue
            run = [*run, (a, b)] if run and run[-1][1] + 1 == a else [(a, b)]
            if len(run) == count:
                return run
        return []

    def read(self) -> list[Path]:
        """The files that hold the table's rows, each row once: the schema block, the merged
        blocks no other holds and the rounds none of them covers."""
        return [
            self.directory / SCHEMA_BLOCK,
            *(self.merged[r] for r in self.outer()),
            *(p for _, p in self.uncovered()),
        ]

"""Which files of a table's blocks hold its rows: each round once, from a merged block where
one holds it."""

from __future__ import annotations

import random

from tacit.serve.block_files import SCHEMA_BLOCK, TableFiles, merged_name, round_name


def _naive_read(rounds: list[int], merged: list[tuple[int, int]]) -> list[str]:
    held = {n for a, b in merged for n in range(a, b + 1)}
    outer = [(a, b) for a, b in merged if not any(c <= a and b <= d and (c, d) != (a, b)
                                                  for c, d in merged)]  # fmt: skip
    return [
        SCHEMA_BLOCK,
        *(merged_name(a, b) for a, b in sorted(outer)),
        *(round_name(n) for n in sorted(rounds) if n not in held),
    ]


def test_a_round_a_merged_block_holds_is_read_from_it_alone(tmp_path):
    rounds, merged = [0, 1, 2, 3, 7, 8, 9, 12], [(0, 3), (4, 8)]
    for name in [SCHEMA_BLOCK, *map(round_name, rounds), *(merged_name(*m) for m in merged)]:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "000000000001.part").write_bytes(b"")  # a file being written: not a block
    files = TableFiles.of(tmp_path)
    assert [p.name for p in files.read()] == _naive_read(rounds, merged)
    assert [p.name for p in files.covered()] == [round_name(n) for n in (0, 1, 2, 3, 7, 8)]
    assert [n for n, _ in files.uncovered()] == [9, 12]


def test_the_files_read_match_the_naive_rule_on_random_directories(tmp_path):
    rng = random.Random(7)
    for case in range(30):
        directory = tmp_path / str(case)
        directory.mkdir()
        cuts = sorted(rng.sample(range(1, 60), 6))
        merged = [(a, b - 1) for a, b in zip(cuts[::2], cuts[1::2], strict=True)]
        rounds = sorted(rng.sample(range(70), rng.randrange(1, 40)))
        for name in [SCHEMA_BLOCK, *map(round_name, rounds), *(merged_name(*m) for m in merged)]:
            (directory / name).write_bytes(b"")
        assert [p.name for p in TableFiles.of(directory).read()] == _naive_read(rounds, merged)


def _nested(rng: random.Random, lo: int, hi: int, depth: int) -> list[tuple[int, int]]:
    """Random merged ranges within [lo, hi), disjoint or nested, as merges make them."""
    if depth == 0 or hi - lo < 2:
        return []
    n = min(2 * rng.randrange(1, 3), (hi - lo + 1) // 2 * 2)
    cuts = sorted(rng.sample(range(lo, hi + 1), n))
    out = []
    for a, b in zip(cuts[::2], cuts[1::2], strict=True):
        if b - a >= 1:
            out.append((a, b - 1))
            out += _nested(rng, a, b, depth - 1)
    return out


def test_merged_blocks_merged_again_are_read_from_the_outer_one_alone(tmp_path):
    rng = random.Random(11)
    for case in range(30):
        directory = tmp_path / str(case)
        directory.mkdir()
        merged = sorted(set(_nested(rng, 0, 60, 3)))
        rounds = sorted(rng.sample(range(70), rng.randrange(1, 40)))
        for name in [SCHEMA_BLOCK, *map(round_name, rounds), *(merged_name(*m) for m in merged)]:
            (directory / name).write_bytes(b"")
        files = TableFiles.of(directory)
        read = [p.name for p in files.read()]
        assert read == _naive_read(rounds, merged)
        on_disk = {p.name for p in directory.iterdir()}
        assert {p.name for p in files.covered()} == on_disk - set(read)


def test_merged_blocks_side_by_side_are_merged_again_a_run_at_a_time(tmp_path):
    """Three at a time, each of fewer than 10 rounds and with no round between: (0, 4) and
    (5, 9) with (10, 12) are, not (14, 16), after the round 13 none holds."""
    for m in [(0, 4), (5, 9), (10, 12), (14, 16), (17, 30), (31, 32)]:
        (tmp_path / merged_name(*m)).write_bytes(b"")
    (tmp_path / round_name(13)).write_bytes(b"")
    files = TableFiles.of(tmp_path)
    assert files.mergeable(10, 3) == [(0, 4), (5, 9), (10, 12)]
    assert files.mergeable(5, 3) == []
    assert files.mergeable(10, 4) == []

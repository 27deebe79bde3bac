"""Which files of a table's blocks hold its rows: each round once, from a merged block where
one holds it."""

from __future__ import annotations

import random

from tacit.serve.block_files import SCHEMA_BLOCK, TableFiles, merged_name, round_name


def _naive_read(rounds: list[int], merged: list[tuple[int, int]]) -> list[str]:
    held = {n for a, b in merged for n in range(a, b + 1)}
    return [
        SCHEMA_BLOCK,
        *(merged_name(a, b) for a, b in sorted(merged)),
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

"""The helpers every command shares: durations, numeric options and ``--json`` output."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
import pytest

from clirun import finish, run_here, start
from tacit.cli.common import bounded, comma_list, finite, parse_duration, print_json
from tacit.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("5s", 5 * 10**9),
        ("250ms", 250 * 10**6),
        ("100us", 100_000),
        ("10ns", 10),
        ("1.5", 1.5e9),
        ("30m", 1800 * 10**9),
        ("72h", 72 * 3600 * 10**9),
        ("7d", 7 * 86400 * 10**9),
    ],
)
def test_durations_in_every_unit(text, ns):
    assert parse_duration(text) == ns


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e30", "-1s", "5 parsecs", ""])
def test_durations_that_are_not_one_are_refused(text):
    with pytest.raises(ConfigError):
        parse_duration(text)


def test_json_output_has_null_for_what_is_not_finite(capsys):
    doc = {"a": float("nan"), "b": [1.0, float("inf")], "c": (2, -float("inf")), "d": "x"}
    assert finite(doc) == {"a": None, "b": [1.0, None], "c": [2, None], "d": "x"}
    print_json(doc)
    assert json.loads(capsys.readouterr().out) == finite(doc)


def test_comma_lists_drop_empty_items():
    assert comma_list(" a, b,,c ,") == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (bounded(0), [0, 3, 2.5], [-1, -0.1, math.nan, math.inf]),
        (bounded(0, 1, lo_open=True), [1e-9, 0.5, 1], [0, 1.01, -math.inf]),
        (bounded(0, 1, lo_open=True, hi_open=True), [0.5], [0, 1]),
        (bounded(-1, lo_open=True), [-0.5, 7], [-1, -2, math.nan]),
    ],
)
def test_numeric_options_outside_their_range_are_refused_by_name(check, good, bad):
    param = click.Option(["--share"])
    for value in good:
        assert check(param, value) == value
    assert check(param, None) is None  # an option left unset
    for value in bad:
        with pytest.raises(ConfigError, match="--share must be"):
            check(param, value)


def test_every_command_refuses_out_of_range_numbers_in_one_line(tmp_path: Path):
    """A few commands of each group: each names the option, exits 2, and runs nothing."""
    runs = {
        option: run_here(*args, cwd=tmp_path)
        for option, args in {
            "--sample": ("evaluate", "x.json", "--sample", "-1"),
            "--top": ("diagnose", "detect", "x.json", "--top", "-1"),
            "--seed": ("paths", "evaluate", "x.json", "--seed", "-2"),
            "--seconds": ("latency", "response", "--interface", "lo", "--seconds", "nan"),
            "--loss": ("latency", "oneway", "simulate", "--loss", "2"),
            "--rate": ("experiment", "netns", "--rate", "0"),
            "--reorder": ("experiment", "asymmetric", "--server", "quic", "--reorder", "2"),
            "--concurrency": ("experiment", "traced-app", "--out", "o", "--concurrency", "0"),
            "--network-share": ("diagnose", "tcp", "--network-share", "inf"),
        }.items()
    }
    for option, r in runs.items():
        assert r.returncode == 2, (option, r.stderr)
        assert r.stderr.startswith(f"tacit: error: {option} must be"), (option, r.stderr)
        assert r.stderr.count("\n") == 1


def test_flags_show_no_value_in_the_help(tmp_path: Path):
    """A flag's help line has no ``<bool>`` that reads as if ``--json true`` were the usage."""
    r = finish({"help": start("diagnose", "critical-path", "--help", cwd=tmp_path)})["help"]
    lines = [line.lstrip("│ ") for line in r.stdout.splitlines()]
    flags = [line for line in lines if line.startswith(("--json", "--blind"))]
    assert len(flags) == 2 and not any("<bool>" in line for line in flags), flags


def test_format_options_list_every_format(tmp_path: Path):
    """The help of each --format names every format the command accepts."""
    from tacit.formats import READ_FORMATS, WRITE_FORMATS

    helps = finish(
        {
            "write": start("reconstruct", "--help", cwd=tmp_path),
            "read": start("diagnose", "detect", "--help", cwd=tmp_path),
        }
    )
    for name, formats in (("write", WRITE_FORMATS), ("read", READ_FORMATS)):
        text = " ".join(helps[name].stdout.replace("│", " ").split())
        assert all(f in text for f in formats), (name, formats, text)


def test_tables_as_tab_separated_values(tmp_path: Path):
    """``--tsv``: each table a header line and one line per row, cells whole, nothing else on
    stdout; without it, the same values in a drawn table."""
    from tacit.formats.jaeger import write_jaeger
    from tacit.simulate import load_app, simulate

    write_jaeger(tmp_path / "t.json", simulate(load_app(None), 50, n_requests=30, seed=1))
    args = ("diagnose", "critical-path", "t.json", "--slowest", "3")
    runs = finish(
        {
            "tsv": start(*args, "--tsv", cwd=tmp_path, columns=40),
            "json": start(*args, "--json", cwd=tmp_path),
        }
    )
    lines = runs["tsv"].stdout.splitlines()
    assert lines[0].split("\t") == ["trace", "latency ms", "top contributors (share of end-to-end)"]
    slowest = json.loads(runs["json"].stdout)["slowest"]
    assert [line.split("\t")[0] for line in lines[1:]] == [t["trace"] for t in slowest[:3]]
    assert all(len(line.split("\t")) == 3 for line in lines)


def test_a_pipe_gets_tables_unwrapped_and_tsv_tables_apart(monkeypatch):
    """Into a pipe a table is as wide as its cells (not wrapped at 80 columns); with --tsv,
    two tables are two blocks, a blank line between them."""
    import io

    from rich.table import Table

    from tacit.cli.common import Results

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr("sys.stdout", io.StringIO())  # a pipe, whatever runs the test
    table = Table("service", "why")
    table.add_row("frontend", "a reason " * 20)
    drawn = Results()
    drawn.file = io.StringIO()
    drawn.print(table)
    assert any(("a reason " * 20).strip() in line for line in drawn.file.getvalue().splitlines())
    tsv = Results()
    tsv.tsv, tsv.file = True, io.StringIO()
    tsv.print(table)
    tsv.print(table)
    blocks = tsv.file.getvalue().split("\n\n")
    assert len(blocks) == 2 and blocks[0] == blocks[1].rstrip("\n")

"""The helpers every command shares: durations and ``--json`` output."""

from __future__ import annotations

import json

import pytest

from tacit.cli.common import comma_list, finite, parse_duration, print_json
from tacit.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "ns"),
    [("5s", 5 * 10**9), ("250ms", 250 * 10**6), ("100us", 100_000), ("10ns", 10), ("1.5", 1.5e9)],
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

"""The root-cause rule language: parsing, checks with positions, three-valued evaluation."""

from __future__ import annotations

import itertools

import pytest

from tacit.diagnosis.rules import RuleSyntaxError, parse_rules, read_rules, tokenize

RULES = """\
# symptoms
SYMPTOM a
SYMPTOM b
SYMPTOM c
SYMPTOM hot        # computed
PROCEDURE hot above_ten
PATHOLOGY p DEF a OR b AND NOT c
PATHOLOGY q DEF (a OR b) AND NOT c
PATHOLOGY r DEF p AND
    NOT q
PATHOLOGY h DEF hot
"""


def above_ten(features):
    v = features.get("x")
    return None if v is None else v > 10


@pytest.fixture
def rules():
    return parse_rules(RULES, "t.rules", {"above_ten": above_ten})


def test_precedence_against_python(rules):
    # NOT > AND > OR: p = a or (b and not c); q = (a or b) and not c; r = p and not q.
    for a, b, c in itertools.product([False, True], repeat=3):
        v = rules.evaluate({"a": a, "b": b, "c": c, "x": 0})
        p = a or (b and not c)
        q = (a or b) and not c
        expected = [n for n, t in (("p", p), ("q", q), ("r", p and not q)) if t]
        assert v.holds == expected, (a, b, c)
        assert v.undetermined == []


def test_procedure_and_unknown_features(rules):
    assert rules.evaluate({"a": False, "b": False, "c": False, "x": 11}).holds == ["h"]
    v = rules.evaluate({"a": True})  # b, c, x missing
    # p = a OR ... is true whatever the rest; q needs NOT c: unknown; h unknown.
    assert v.holds == ["p"]
    assert v.undetermined == ["q", "r", "h"]
    assert v.symptoms["hot"] is None


def test_non_boolean_feature_is_an_error(rules):
    with pytest.raises(Exception, match="symptom a is 'yes'"):
        rules.evaluate({"a": "yes"}, problem=7)


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ("SYMPTOM a\nPATHOLOGY p DEF a AND\n", 3, 1, "expected a symptom"),
        ("SYMPTOM a\nPATHOLOGY p DEF (a\n", 3, 1, "expected ')'"),
        ("SYMPTOM a\nPATHOLOGY p a\n", 2, 13, "expected DEF"),
        ("SYMPTOM a\n  PATHOLOGY p DEF a & a\n", 2, 21, "unexpected character '&'"),
        ("SYMPTOM a\nPATHOLOGY p DEF a AND zz\n", 2, 23, "undefined symptom or pathology 'zz'"),
        ("SYMPTOM a\nSYMPTOM a\n", 2, 9, "already defined as a symptom (line 1)"),
        ("SYMPTOM a\nPATHOLOGY a DEF a\n", 2, 11, "already defined as a symptom"),
        ("SYMPTOM a\nPROCEDURE a nosuchfunc\n", 2, 13, "unknown procedure 'nosuchfunc'"),
        ("SYMPTOM a\nPROCEDURE b rtt_inflated\n", 2, 13, "not a declared SYMPTOM"),
        ("SYMPTOM a\nDEF\n", 2, 1, "expected SYMPTOM, PATHOLOGY or PROCEDURE"),
        (
            "SYMPTOM a\nPATHOLOGY p DEF q OR a\nPATHOLOGY q DEF a AND p\n",
            3,
            23,
            "cycle: p -> q -> p",
        ),
        ("SYMPTOM a\nPATHOLOGY p DEF NOT p\n", 2, 21, "cycle: p -> p"),
    ],
)
def test_errors_give_line_and_column(text, line, column, message):
    with pytest.raises(RuleSyntaxError) as e:
        parse_rules(text, "bad.rules")
    assert (e.value.line, e.value.column) == (line, column), str(e.value)
    assert message in str(e.value)
    assert str(e.value).startswith(f"bad.rules: record line {line} column {column}: ")


def test_tokens_keep_positions():
    toks = tokenize("SYMPTOM x # c\n  PATHOLOGY y DEF (x)")
    assert [(t.kind, t.line, t.column) for t in toks] == [
        ("SYMPTOM", 1, 1),
        ("NAME", 1, 9),
        ("PATHOLOGY", 2, 3),
        ("NAME", 2, 13),
        ("DEF", 2, 15),
        ("(", 2, 19),
        ("NAME", 2, 20),
        (")", 2, 21),
        ("EOF", 2, 22),
    ]


def test_default_rules_diagnose_the_video_case_study():
    rules = read_rules()
    base = {"slow": True, "client_bound": False, "minrtt_ns": 20_000_000}
    congested = {**base, "network_bound": True, "server_bound": False}
    congested |= {"retransmissions": 2, "rtt_ns": 90_000_000}
    lossy = {**congested, "rtt_ns": 22_000_000}
    server = {**base, "network_bound": False, "server_bound": True}
    server |= {"retransmissions": 0, "rtt_ns": 21_000_000}
    client = {**server, "server_bound": False, "client_bound": True}
    fast = {**server, "slow": False}
    verdicts = rules.evaluate_all([congested, lossy, server, client, fast])
    assert [v.holds for v in verdicts] == [
        ["path_congestion", "internet_path"],
        ["lossy_path", "internet_path"],
        ["server_slowness"],
        ["client_stack"],
        [],
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SYMPTOM a\nPATHOLOGY p DEF " + "NOT " * 5000 + "a\n", "nested deeper than 100"),
        ("SYMPTOM a\nPATHOLOGY p DEF " + "(" * 5000 + "a" + ")" * 5000, "nested deeper than 100"),
        (
            "SYMPTOM a\nPATHOLOGY p4999 DEF a\n"
            + "".join(f"PATHOLOGY p{k} DEF p{k + 1}\n" for k in range(4999)),
            "more than 100 deep",
        ),
    ],
)
def test_nesting_beyond_a_bound_is_a_syntax_error_not_a_recursion_error(text, message):
    with pytest.raises(RuleSyntaxError, match=message):
        parse_rules(text, "deep.rules")
    parse_rules("SYMPTOM a\nPATHOLOGY p DEF " + "NOT " * 99 + "a\n")  # within it

"""Root-cause rules: YTrace's small language of symptoms and pathologies, parsed and evaluated.

YTrace ("End-to-end Performance Diagnosis in Large Cloud and Content Providers", Kanuparthy et
al.) lets operators write the domain knowledge of root-cause analysis as rules over the
features of a detected problem::

    # a comment, to the end of the line
    SYMPTOM retransmissions
    SYMPTOM high_rtt
    PROCEDURE high_rtt rtt_inflated
    PATHOLOGY congestion DEF (high_rtt AND retransmissions)
    PATHOLOGY lossy_path DEF retransmissions AND NOT high_rtt

``SYMPTOM name`` declares a symptom; its value for a problem is the problem's feature of that
name (true or false), or what the procedure named by ``PROCEDURE name funcname`` computes from
the problem's features (a Python function in :data:`PROCEDURES` or one passed to
:func:`parse_rules`). ``PATHOLOGY name DEF expr`` defines a pathology as a boolean expression
of symptoms and other pathologies with ``NOT`` > ``AND`` > ``OR`` and parentheses: the
paper's grammar (§Root cause analysis: ``SYMPTOM``, ``PATHOLOGY p DEF``, ``AND``, ``OR``,
``NOT``, parentheses, ``PROCEDURE symptom funcname``). Ours: statements may span lines (each
starts with its keyword), keywords are upper case, and a symptom whose feature is missing is
*unknown* — three-valued (Kleene) logic, so that ``NOT`` of a missing feature does not claim a
pathology; a pathology holds only when it is true, and is reported as undetermined when
unknown.

The parser is a tokenizer and a recursive descent (the grammar is five productions; a parser
library would add a dependency for no gain). Every error — syntax, an undefined symptom, a
duplicate definition, an unknown procedure, a cycle among pathologies — is a
:class:`RuleSyntaxError` giving the line and column.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from tacit.errors import InputError
from tacit.formats.textio import read_text

Procedure = Callable[[Mapping[str, Any]], bool | None]
"""A procedure computes a symptom from a problem's features: True, False, or None (unknown)."""

KEYWORDS = ("SYMPTOM", "PATHOLOGY", "PROCEDURE", "DEF", "AND", "OR", "NOT")

RTT_INFLATION = 2.0
"""``rtt_inflated``: the smoothed RTT is at least this multiple of the connection's minimum
RTT — a standing queue at least as long as the path's base delay. Ours."""


def _number(features: Mapping[str, Any], name: str) -> float | None:
    v = features.get(name)
    return None if v is None or isinstance(v, bool) else float(v)


def has_retransmissions(features: Mapping[str, Any]) -> bool | None:
    """The connection retransmitted during the problem (``retransmissions`` > 0)."""
    k = _number(features, "retransmissions")
    return None if k is None else k > 0


def rtt_inflated(features: Mapping[str, Any]) -> bool | None:
    """Queueing on the path: ``rtt_ns`` ≥ :data:`RTT_INFLATION` × ``minrtt_ns``."""
    rtt, base = _number(features, "rtt_ns"), _number(features, "minrtt_ns")
    if rtt is None or base is None:
        return None
    return rtt >= RTT_INFLATION * base


PROCEDURES: dict[str, Procedure] = {
    "has_retransmissions": has_retransmissions,
    "rtt_inflated": rtt_inflated,
}
"""The built-in procedures, by the name a ``PROCEDURE`` statement gives."""


class RuleSyntaxError(InputError):
    """A malformed or inconsistent rule file, at ``line`` and ``column`` (both from 1)."""

    def __init__(self, message: str, *, path: str, line: int, column: int) -> None:
        self.line = line
        self.column = column
        super().__init__(message, path=path, record=f"line {line} column {column}")


# --- tokens ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    kind: str
    """A keyword, ``NAME``, ``(``, ``)`` or ``EOF``."""
    text: str
    line: int
    column: int


_TOKEN = re.compile(
    r"(?P<space>[ \t\r]+)|(?P<newline>\n)|(?P<comment>#[^\n]*)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<paren>[()])"
)


def tokenize(text: str, path: str = "<rules>") -> list[Token]:
    """The tokens of ``text``, ending with ``EOF``; comments and whitespace dropped."""
    tokens: list[Token] = []
    line, line_start, pos = 1, 0, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        column = pos - line_start + 1
        if m is None:
            raise RuleSyntaxError(
                f"unexpected character {text[pos]!r}", path=path, line=line, column=column
            )
        kind = m.lastgroup
        if kind == "newline":
            line, line_start = line + 1, m.end()
        elif kind == "name":
            word = m.group()
            tokens.append(Token(word if word in KEYWORDS else "NAME", word, line, column))
        elif kind == "paren":
            tokens.append(Token(m.group(), m.group(), line, column))
        pos = m.end()
    tokens.append(Token("EOF", "", line, pos - line_start + 1))
    return tokens


# --- syntax tree ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    """A reference to a symptom or pathology, where it was written."""

    name: str
    line: int
    column: int


@dataclass(frozen=True)
class Not:
    operand: Expr


@dataclass(frozen=True)
class And:
    operands: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    operands: tuple[Expr, ...]


Expr = Ref | Not | And | Or


@dataclass(frozen=True)
class Definition:
    """A declared name (symptom or pathology) or a procedure binding, where it was written."""

    name: str
    line: int
    column: int
    expr: Expr | None = None
    """The pathology's definition (None for a symptom)."""
    procedure: str | None = None


MAX_NESTING = 100
"""How deep NOT and parentheses may nest in an expression, and pathologies refer to
pathologies: the parser and the checks recurse, and a file nested deeper than Python's stack
allows ended in a RecursionError."""


class _Parser:
    """Recursive descent over the grammar::

    rules   := statement* EOF
    statement := SYMPTOM NAME | PATHOLOGY NAME DEF expr | PROCEDURE NAME NAME
    expr    := term (OR term)*
    term    := factor (AND factor)*
    factor  := NOT factor | "(" expr ")" | NAME
    """

    def __init__(self, tokens: list[Token], path: str) -> None:
        self.tokens = tokens
        self.i = 0
        self.path = path
        self.depth = 0  # NOT and parentheses open around the current factor

    def error(self, message: str, tok: Token) -> RuleSyntaxError:
        return RuleSyntaxError(message, path=self.path, line=tok.line, column=tok.column)

    def peek(self) -> Token:
        return self.tokens[self.i]

    def expect(self, kind: str, what: str) -> Token:
        tok = self.peek()
        if tok.kind != kind:
            found = "end of file" if tok.kind == "EOF" else repr(tok.text)
            raise self.error(f"expected {what}, found {found}", tok)
        self.i += 1
        return tok

    def statements(self) -> list[tuple[str, Definition]]:
        out = []
        while (tok := self.peek()).kind != "EOF":
            self.i += 1
            if tok.kind == "SYMPTOM":
                name = self.expect("NAME", "a symptom name")
                out.append(("symptom", Definition(name.text, name.line, name.column)))
            elif tok.kind == "PATHOLOGY":
                name = self.expect("NAME", "a pathology name")
                self.expect("DEF", "DEF")
                expr = self.expr()
                out.append(("pathology", Definition(name.text, name.line, name.column, expr)))
            elif tok.kind == "PROCEDURE":
                name = self.expect("NAME", "the symptom a procedure computes")
                func = self.expect("NAME", "a procedure (function) name")
                d = Definition(name.text, func.line, func.column, procedure=func.text)
                out.append(("procedure", d))
            else:
                raise self.error(
                    f"expected SYMPTOM, PATHOLOGY or PROCEDURE, found {tok.text!r}", tok
                )
        return out

    def expr(self) -> Expr:
        operands = [self.term()]
        while self.peek().kind == "OR":
            self.i += 1
            operands.append(self.term())
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def term(self) -> Expr:
        operands = [self.factor()]
        while self.peek().kind == "AND":
            self.i += 1
            operands.append(self.factor())
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def factor(self) -> Expr:
        tok = self.peek()
        if tok.kind not in ("NOT", "("):
            name = self.expect("NAME", "a symptom, a pathology, NOT or '('")
            return Ref(name.text, name.line, name.column)
        if self.depth >= MAX_NESTING:
            raise self.error(f"an expression nested deeper than {MAX_NESTING} levels", tok)
        self.i += 1
        self.depth += 1
        try:
            if tok.kind == "NOT":
                return Not(self.factor())
            e = self.expr()
            self.expect(")", "')'")
            return e
        finally:
            self.depth -= 1


# --- rule sets ------------------------------------------------------------------------------


@dataclass
class Verdict:
    """The rules' answer for one problem."""

    holds: list[str]
    """Pathologies that are true, in the order of the rule file."""
    undetermined: list[str]
    """Pathologies that depend on a missing feature and could be either."""
    symptoms: dict[str, bool | None]

    def as_dict(self) -> dict[str, Any]:
        return {"holds": self.holds, "undetermined": self.undetermined, "symptoms": self.symptoms}


@dataclass
class RuleSet:
    """Parsed and checked rules (see :func:`parse_rules`)."""

    symptoms: dict[str, Definition]
    pathologies: dict[str, Definition]
    """In dependency order: every pathology after those it refers to."""
    procedures: dict[str, Procedure] = field(default_factory=dict)
    """Symptom → the procedure that computes it."""
    path: str = "<rules>"

    def evaluate(self, features: Mapping[str, Any], problem: int | str = 0) -> Verdict:
        """Which pathologies hold for a problem with these ``features``."""
        values: dict[str, bool | None] = {}
        for name in self.symptoms:
            proc = self.procedures.get(name)
            try:
                v = proc(features) if proc else features.get(name)
            except (TypeError, ValueError) as e:
                raise InputError(
                    f"procedure {getattr(proc, '__name__', proc)} of symptom {name} failed: {e}",
                    record=f"problem {problem}",
                ) from None
            values[name] = _truth(v, name, problem)
        symptoms = dict(values)
        holds, undetermined = [], []
        for name, d in self.pathologies.items():
            assert d.expr is not None
            v = values[name] = _eval(d.expr, values)
            if v:
                holds.append(name)
            elif v is None:
                undetermined.append(name)
        return Verdict(holds, undetermined, symptoms)

    def evaluate_all(self, problems: Iterable[Mapping[str, Any]]) -> list[Verdict]:
        """:meth:`evaluate` for each problem, in order."""
        return [self.evaluate(f, problem=i) for i, f in enumerate(problems)]


def _truth(v: Any, name: str, problem: int | str) -> bool | None:
    if v is None or isinstance(v, bool | np.bool_):
        return None if v is None else bool(v)
    if isinstance(v, int | np.integer) and v in (0, 1):
        return bool(v)
    if isinstance(v, float) and v != v:  # NaN: missing
        return None
    raise InputError(
        f"symptom {name} is {v!r}, expected true or false (or give it a PROCEDURE)",
        record=f"problem {problem}",
    )


def _eval(e: Expr, values: Mapping[str, bool | None]) -> bool | None:
    """Kleene's three-valued logic: None is unknown."""
    if isinstance(e, Ref):
        return values[e.name]
    if isinstance(e, Not):
        v = _eval(e.operand, values)
        return None if v is None else not v
    vs = [_eval(o, values) for o in e.operands]
    if isinstance(e, And):
        return False if False in vs else (None if None in vs else True)
    return True if True in vs else (None if None in vs else False)


def parse_rules(  # noqa: C901
    text: str, path: str = "<rules>", procedures: Mapping[str, Procedure] | None = None
) -> RuleSet:
    """Parse and check a rule file's ``text``; ``procedures`` add to (or override)
    :data:`PROCEDURES` for its ``PROCEDURE`` statements."""
    registry = {**PROCEDURES, **(procedures or {})}
    statements = _Parser(tokenize(text, path), path).statements()

    def fail(message: str, at: Definition | Ref) -> RuleSyntaxError:
        return RuleSyntaxError(message, path=path, line=at.line, column=at.column)

    symptoms: dict[str, Definition] = {}
    pathologies: dict[str, Definition] = {}
    bindings: dict[str, Definition] = {}
    for kind, d in statements:
        if kind == "procedure":
            if d.name in bindings:
                first = bindings[d.name]
                raise fail(f"symptom {d.name} already has a PROCEDURE (line {first.line})", d)
            if d.procedure not in registry:
                known = ", ".join(sorted(registry)) or "none"
                raise fail(f"unknown procedure {d.procedure!r} (known: {known})", d)
            bindings[d.name] = d
            continue
        previous = symptoms.get(d.name) or pathologies.get(d.name)
        if previous is not None:
            what = "a symptom" if d.name in symptoms else "a pathology"
            raise fail(f"{d.name} is already defined as {what} (line {previous.line})", d)
        (symptoms if kind == "symptom" else pathologies)[d.name] = d
    for name, d in bindings.items():
        if name not in symptoms:
            raise fail(f"PROCEDURE for {name}, which is not a declared SYMPTOM", d)
    for d in pathologies.values():
        for ref in _refs(d.expr):
            if ref.name not in symptoms and ref.name not in pathologies:
                raise fail(f"undefined symptom or pathology {ref.name!r}", ref)
    ordered = _dependency_order(pathologies, fail)
    procs = {name: registry[d.procedure] for name, d in bindings.items() if d.procedure}
    return RuleSet(symptoms, ordered, procs, path)


def _refs(e: Expr | None) -> Iterable[Ref]:
    if isinstance(e, Ref):
        yield e
    elif isinstance(e, Not):
        yield from _refs(e.operand)
    elif isinstance(e, And | Or):
        for o in e.operands:
            yield from _refs(o)


def _dependency_order(
    pathologies: dict[str, Definition], fail: Callable[[str, Definition | Ref], Exception]
) -> dict[str, Definition]:
    """The pathologies with each after those its definition refers to; a cycle is an error at
    the reference that closes it."""
    done: dict[str, Definition] = {}
    on_stack: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if len(on_stack) >= MAX_NESTING:
            raise fail(
                f"pathologies refer to each other more than {MAX_NESTING} deep",
                pathologies[name],
            )
        on_stack.append(name)
        for ref in _refs(pathologies[name].expr):
            if ref.name not in pathologies:
                continue
            if ref.name in on_stack:
                cycle = " -> ".join([*on_stack[on_stack.index(ref.name) :], ref.name])
                raise fail(f"pathologies refer to each other in a cycle: {cycle}", ref)
            visit(ref.name)
        on_stack.pop()
        done[name] = pathologies[name]

    for name in pathologies:
        visit(name)
    return done


def read_rules(
    path: str | Path | None = None, procedures: Mapping[str, Procedure] | None = None
) -> RuleSet:
    """The rules in ``path``, or the packaged default rules (``rules/default.rules``)."""
    if path is None:
        text = default_rules_text()
        return parse_rules(text, DEFAULT_RULES, procedures)
    return parse_rules(read_text(path), str(path), procedures)


DEFAULT_RULES = "tacit/diagnosis/rules/default.rules"


def default_rules_text() -> str:
    """The text of the packaged default rule file."""
    return resources.files("tacit.diagnosis").joinpath("rules/default.rules").read_text("utf-8")

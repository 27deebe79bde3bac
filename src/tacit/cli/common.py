"""What every command shares: the consoles, ``--json`` output, progress, and option parsing."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tacit.errors import ConfigError

console = Console(stderr=True)
"""Messages, tables and progress for people: stderr."""


class Results(Console):
    """The console results go to: stdout; into a pipe or a file at the width its tables need
    (a terminal's width on a terminal; ``COLUMNS`` when set), not wrapped at 80 columns. With
    :attr:`tsv` (``tacit --tsv ...``), for pipes, every table is written as tab-separated values
    (a header line, then one line per row, cells whole and on one line; a blank line between
    two tables) and everything else goes to stderr, so that stdout holds only the tables'
    values."""

    tsv = False
    force = False
    """``tacit --force``: outputs that exist are replaced (:func:`refuse_existing_outputs`)."""

    def __init__(self) -> None:
        piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
        super().__init__(width=PIPE_WIDTH if piped else None)
        self._tables = 0

    def print(self, *objects: Any, **options: Any) -> None:  # type: ignore[override]
        if not self.tsv:
            super().print(*objects, **options)
        elif objects and all(isinstance(o, Table) for o in objects):
            for table in objects:
                self.file.write("\n" * bool(self._tables) + "\n".join(_tsv_lines(table)) + "\n")
                self._tables += 1
        else:
            console.print(*objects, **options)


def _tsv_lines(table: Table) -> list[str]:
    def text(cell: Any) -> str:
        plain = cell.plain if hasattr(cell, "plain") else str(cell)
        return " ".join(plain.split())  # no tab or line break inside a cell

    columns = [[text(c.header), *map(text, c.cells)] for c in table.columns]
    return ["\t".join(row) for row in zip(*columns, strict=True)]


PIPE_WIDTH = 1000
"""The width results are laid out in for a pipe or a file: tables take only what they need."""
out = Results()
"""Results: stdout."""


def flag(*names: str, **options: Any) -> Any:
    """A boolean option (``typer.Option``) whose help shows no value: typer 0.29 with click 8.5
    shows ``<bool>`` after every flag, which reads as if ``--json true`` were the usage."""
    return typer.Option(*names, metavar="", **options)


JsonOpt = Annotated[bool, flag("--json", help="Machine-readable JSON on stdout.")]

UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
    "d": 86_400_000_000_000,
}
MAX_NS = 2**63 - 1


def finite(x: Any) -> Any:
    """``x`` with every non-finite float replaced by None, through dicts, lists and tuples."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return x


_JSON = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def print_json(doc: Any) -> None:
    """``doc`` as valid JSON on stdout: NaN and infinities become null. Written by orjson,
    which takes a large document (a path pattern of a hundred thousand hops) in a fraction of
    the standard library's time and memory; an integer beyond 64 bits, which orjson refuses,
    by the standard library. Highlighted on a terminal; into a pipe or a file written as is
    (rich's re-parsing and highlighting take seconds on a document of megabytes)."""
    try:
        text = orjson.dumps(doc, option=_JSON).decode()
    except orjson.JSONEncodeError:
        text = json.dumps(finite(doc), indent=2, ensure_ascii=False)
    if out.is_terminal:
        out.print_json(text)
    else:
        out.file.write(text + "\n")


class _Notices(logging.Handler):
    """The library's notices (``logging`` warnings of the ``tacit`` loggers) as one line each
    on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        console.print(
            f"tacit: note: {as_given(record.getMessage())}", markup=False, highlight=False
        )


QUIET = False
"""``tacit --quiet``: no progress bars and no notices."""


def show_notices(quiet: bool) -> None:
    """Print the library's notices on stderr, or (``quiet``) neither them nor progress."""
    global QUIET
    QUIET = quiet
    logging.getLogger("tacit").addHandler(_Notices(logging.ERROR if quiet else logging.WARNING))


@contextmanager
def progress_bar(
    total: int | None, label: str, enabled: bool
) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr advanced by a callback taking a count (none if disabled,
    :data:`QUIET` or stderr is not a terminal); with ``total`` None (a stream of unknown
    length), a running count."""
    if not enabled or QUIET or not console.is_terminal:
        yield None
        return
    with Progress(
        TextColumn(label),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}" if total is not None else "{task.completed}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as p:
        task = p.add_task(label, total=total)
        yield lambda n: p.advance(task, n)


OUTPUT_OPTIONS = frozenset({"--out", "--html", "--output", "-o"})
"""The options that name a file to write: ``-`` after one is the standard output."""


def refuse_existing_outputs(argv: list[str], force: bool) -> None:
    """Refuse, before anything runs, an output option naming a file that exists, unless
    ``force``: a command replaces its output only when asked to. (The replacement itself is
    atomic, :func:`tacit.outputs.atomic_output`; an output that is also an input is refused
    even with ``force``.)"""
    if force or "--help" in argv:
        return
    for i, a in enumerate(argv):
        name, eq, value = a.partition("=")
        if name not in OUTPUT_OPTIONS:
            continue
        path = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        if path and path != "-" and Path(path).is_file():
            raise ConfigError(f"{path}: the output exists; add --force to replace it")


@contextmanager
def standard_streams(argv: list[str]) -> Iterator[list[str]]:
    """``argv`` with ``-`` standing for the standard streams: after an output option the
    standard output (written by :func:`tacit.outputs.atomic_output`; the command's messages
    and summary then go to stderr, so that the data stays alone on stdout), anywhere else the
    standard input, spooled to a temporary file so that every reader takes it (gzip, pcap and
    all) and named ``stdin`` in messages. Standard input can be read once: one ``-`` input."""
    from tacit.outputs import STDIO

    to_stdout = {f"{o}={STDIO}" for o in OUTPUT_OPTIONS}
    outputs = [
        i
        for i, a in enumerate(argv)
        if a in to_stdout or (a == STDIO and argv[i - 1] in OUTPUT_OPTIONS)
    ]
    inputs = [i for i, a in enumerate(argv) if a == STDIO and i not in outputs]
    if outputs:
        out.file = sys.stderr
    if len(inputs) > 1:
        raise ConfigError("standard input can be read once: give '-' for one input only")
    if not inputs:
        yield argv
        return
    global _spooled_stdin
    with tempfile.TemporaryDirectory(prefix="tacit-") as tmp:
        spooled = Path(tmp) / "stdin"
        with spooled.open("wb") as f:
            shutil.copyfileobj(sys.stdin.buffer, f)
        _spooled_stdin = str(spooled)
        yield [str(spooled) if i in inputs else a for i, a in enumerate(argv)]


_spooled_stdin: str | None = None
"""Where :func:`standard_streams` spooled the standard input, if it did."""


def as_given(message: object) -> str:
    """A message as the user would write its files: the spooled standard input named
    ``stdin`` rather than by its temporary path."""
    text = str(message)
    return text.replace(_spooled_stdin, "stdin") if _spooled_stdin else text


LEARNED = ("learn", "blind")
"""The call graphs a command learns from its own input: from its ground truth, or blind."""


def load_callgraph(spec: str):
    """The call graph in the YAML file ``spec``, or None for one learned from the input
    (:data:`LEARNED`: see :func:`input_callgraph`)."""
    from tacit.reconstruct.callgraph import CallGraph

    if spec in LEARNED:
        return None
    if not Path(spec).exists():
        raise ConfigError(f"{spec}: no such call graph file (or say 'learn' or 'blind')")
    return CallGraph.load(spec)


def input_callgraph(spec: str, observed):
    """The call graph ``spec`` names for the input ``observed``: a file's, or learned from the
    input's ground truth ("learn"), or from its requests that ran alone or kept their context
    ("blind", :mod:`tacit.reconstruct.blind_callgraph`)."""
    from tacit.reconstruct.blind_callgraph import learn_blind
    from tacit.reconstruct.callgraph import learn_callgraph

    if spec == "blind":
        return learn_blind(observed.without_truth(given=True))[0]
    return load_callgraph(spec) or learn_callgraph(observed.spans)


def id_column(table: Table, header: str, ids: Iterable[str]) -> None:
    """Add a column for ``ids``, identifiers a person copies (trace ids into Jaeger's search):
    as wide as the longest, so that the other columns wrap first and no id is cut short."""
    table.add_column(header, min_width=max((len(i) for i in ids), default=0), no_wrap=True)


@contextmanager
def working(label: str, enabled: bool = True) -> Iterator[None]:
    """A spinner with ``label`` on stderr while a step of unknown length runs (none if disabled,
    :data:`QUIET` or stderr is not a terminal)."""
    if not enabled or QUIET or not console.is_terminal:
        yield
        return
    with console.status(label):
        yield


def print_unmapped(reasons: Mapping[str, int]) -> None:
    """The client spans a reconstruction left without parent, by reason; the calls that begin
    traces (from instances that serve no requests, :data:`ROOT_CALL`) apart, as roots."""
    from tacit.reconstruct.result import ROOT_CALL

    for reason, n in reasons.items():
        if reason == ROOT_CALL:
            out.print(f"  roots: {n} calls from instances that serve no requests (clients)")
        else:
            out.print(f"  unmapped: {n} ({reason})")


def label(key: str) -> str:
    """An accounting key (an identifier, as ``--json`` writes it) as a table shows it."""
    return key.replace("_", " ")


def percent(x: float | None) -> str:
    """A fraction as a percentage with one decimal ("–" when there is none)."""
    return "–" if x is None or not math.isfinite(x) else f"{100 * x:.1f}%"


def ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds with three decimals ("–" when there are none)."""
    return "–" if ns is None or not math.isfinite(ns) else f"{ns / 1e6:.3f}"


def comma_list(text: str) -> list[str]:
    """The items of a comma-separated option, stripped, empty ones dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_duration(text: str) -> int:
    """``5s``, ``250ms``, ``100us``, ``10ns``, ``30m``, ``72h``, ``7d`` or plain seconds →
    nanoseconds (finite, not negative, at most what int64 nanoseconds hold: about 292
    years)."""
    t = text.strip().lower()
    for unit in sorted(UNITS_NS, key=len, reverse=True):
        if t.endswith(unit):
            number, scale = t[: -len(unit)], UNITS_NS[unit]
            break
    else:
        number, scale = t, UNITS_NS["s"]
    try:
        value = float(number)
    except ValueError:
        raise ConfigError(f"not a duration: {text!r} (e.g. 5s, 250ms)") from None
    if not math.isfinite(value):
        raise ConfigError(f"a duration must be a finite number: {text!r}")
    if value < 0:
        raise ConfigError(f"a duration cannot be negative: {text!r}")
    if value * scale > MAX_NS:
        raise ConfigError(f"a duration longer than 292 years: {text!r}")
    return round(value * scale)


def bounded(
    lo: float = -math.inf, hi: float = math.inf, *, lo_open: bool = False, hi_open: bool = False
) -> Callable[[typer.CallbackParam, Any], Any]:
    """A typer callback that refuses a number outside ``lo``..``hi`` (ends included unless
    ``*_open``), or NaN or infinite, as a one-line :class:`ConfigError` naming the option."""
    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    if hi == math.inf:
        wanted = f"> {_number(lo)}" if lo_open else f">= {_number(lo)}"
    else:
        wanted = f"in {left}{_number(lo)}, {_number(hi)}{right}"

    def check(param: typer.CallbackParam, value: Any) -> Any:
        if value is None:
            return value
        inside = (lo < value if lo_open else lo <= value) and (
            value < hi if hi_open else value <= hi
        )
        if not (math.isfinite(value) and inside):
            raise ConfigError(f"{param.opts[0]} must be {wanted}, got {value}")
        return value

    return check


def check_packet_source(capture: Path | None, interface: str | None, bpf: str) -> None:
    """Refuse what a command reading packets cannot take: both a capture file and a live
    ``--interface``, or neither; a ``--filter`` without ``--interface`` (it filters a live
    capture, and would be ignored on a file)."""
    if (capture is None) == (interface is None):
        raise ConfigError("give a capture file or --interface, not both")
    if bpf and interface is None:
        raise ConfigError("--filter goes with --interface (a live capture)")


def _number(x: float) -> str:
    """A bound as written: whole numbers in full (2^30 as 1073741824, not 1.07374e+09)."""
    return str(int(x)) if math.isfinite(x) and x == int(x) else f"{x:g}"


COUNT = bounded(0)
"""A count or a number of items to show: 0 or more."""
POSITIVE = bounded(0, lo_open=True)
"""A rate, a size or a length: more than 0."""
LIVE_SECONDS = bounded(0, 86400, lo_open=True)
"""How long a live capture runs: more than 0 and at most a day (what it captures is held in
memory until it ends)."""
SEED = bounded(0, 2**63 - 1)
"""A random seed: 0 to 2^63 - 1 (numpy's generators take any whole number from 0, but seeds
also go through int64 arrays and compiled hashing)."""
FRACTION = bounded(0, 1)
"""A probability or a share: 0 to 1."""
PERCENT = bounded(0, 100)
"""A percentage: 0 to 100."""

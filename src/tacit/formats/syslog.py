"""Device syslogs: RFC 5424, RFC 3164 (BSD) and the loghub sample formats, read into
:class:`~tacit.model.syslog_records.SyslogRecords`.

YTrace (Kanuparthy et al., arXiv 1602.03273, §4 "network") diagnoses the network from the
syslogs of its devices; the first step is to read them. One line is one record. The format of a
file is detected from its first lines (the one most of them match); a file none of whose first
lines matches a known format is an :class:`~tacit.errors.InputError` naming the first line.
Lines that do not match the detected format are counted as ``unparsed`` (and their line numbers
kept) or, with ``errors="raise"``, are an error naming the line.

Times are int64 nanoseconds. RFC 3164 timestamps carry neither year nor zone: they are read in
UTC in ``year`` (default 2000, a leap year, so that Feb 29 parses). The loghub formats are the
``log_format`` strings of the loghub benchmark (BGL, HPC, Thunderbird; Linux and OpenSSH are
RFC 3164 without a priority), and the message is what loghub calls ``Content``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tacit.errors import ConfigError, InputError
from tacit.formats.common import Paths, input_files
from tacit.formats.textio import csv_rows, read_text
from tacit.model.syslog_records import SyslogRecords

SUFFIXES = (".log", ".log.gz", ".syslog", ".syslog.gz", ".txt", ".txt.gz")
"""The files :func:`read_syslog` takes from a directory."""
DETECT_LINES = 20
"""How many non-blank first lines decide a file's format."""
MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTHS = {m: i for i, m in enumerate(MONTH_NAMES, 1)}
S = 1_000_000_000

_TAG = r"(?P<app>.*?)(?:\[(?P<pid>\d+)\])?: (?P<msg>.*)"
_PATTERNS = {
    "rfc5424": re.compile(
        r"<(?P<pri>\d{1,3})>1 (?P<ts>\S+) (?P<host>\S+) (?P<app>\S+) (?P<pid>\S+) \S+ "
        r"(?P<sd>-|(?:\[(?:[^\]\\]|\\.)*\])+)(?: (?P<msg>.*))?"
    ),
    "rfc3164": re.compile(
        r"(?:<(?P<pri>\d{1,3})>)?(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) "
        r"(?P<hms>\d{2}:\d{2}:\d{2}) (?P<host>\S+) " + _TAG
    ),
    "bgl": re.compile(
        r"\S+ \d+ \d{4}\.\d{2}\.\d{2} (?P<host>\S+) "
        r"(?P<ts>\d{4}-\d{2}-\d{2}-\d{2}\.\d{2}\.\d{2}\.\d{6}) "
        r"\S+ \S+ (?P<app>\S+) \S+ ?(?P<msg>.*)"
    ),
    "hpc": re.compile(r"\d+ (?P<host>\S+) (?P<app>\S+) \S+ (?P<epoch>\d+) -?\d+ (?P<msg>.*)"),
    "thunderbird": re.compile(
        r"\S+ (?P<epoch>\d+) \d{4}\.\d{2}\.\d{2} (?P<host>\S+) [A-Z][a-z]{2} +\d{1,2} "
        r"\d{2}:\d{2}:\d{2} \S+ " + _TAG
    ),
}
FORMATS = ("auto", *_PATTERNS)


@dataclass
class SyslogRead:
    """Records, with ``accounting`` (lines, parsed, blank, unparsed), the format of each file
    and the first unparsed line numbers (``file:line``)."""

    records: SyslogRecords
    accounting: dict[str, int]
    formats: dict[str, str]
    unparsed_lines: list[str]


def _time_5424(m: re.Match, year: int) -> int:
    ts = m["ts"]
    if ts == "-":
        raise ValueError("no timestamp")
    t = datetime.fromisoformat(ts)
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return _ns(t)


def _time_3164(m: re.Match, year: int) -> int:
    month = MONTHS.get(m["mon"])
    if month is None:
        raise ValueError(f"unknown month {m['mon']!r}")
    h, mi, s = map(int, m["hms"].split(":"))
    return _ns(datetime(year, month, int(m["day"]), h, mi, s, tzinfo=UTC))


def _time_bgl(m: re.Match, year: int) -> int:
    t = datetime.strptime(m["ts"], "%Y-%m-%d-%H.%M.%S.%f").replace(tzinfo=UTC)
    return _ns(t)


def _time_epoch(m: re.Match, year: int) -> int:
    return int(m["epoch"]) * S


def _ns(t: datetime) -> int:
    whole = int(t.replace(microsecond=0).timestamp())
    return whole * S + t.microsecond * 1000


_TIMES: dict[str, Callable[[re.Match, int], int]] = {
    "rfc5424": _time_5424,
    "rfc3164": _time_3164,
    "bgl": _time_bgl,
    "hpc": _time_epoch,
    "thunderbird": _time_epoch,
}


def detect_syslog_format(lines: list[str], path: str = "<text>") -> str:
    """The format most of the first :data:`DETECT_LINES` non-blank ``lines`` match (the first in
    :data:`FORMATS` order on a tie); an :class:`InputError` naming the first line if none does."""
    head = [(i, ln) for i, ln in enumerate(lines, 1) if ln.strip()][:DETECT_LINES]
    if not head:
        raise InputError("empty syslog file", path=path)
    scores = {
        f: sum(bool(p.fullmatch(ln.rstrip("\r"))) for _, ln in head) for f, p in _PATTERNS.items()
    }
    best = max(scores, key=lambda f: scores[f])
    if scores[best] == 0:
        raise InputError(
            f"unknown syslog format (expected one of {', '.join(_PATTERNS)}): {head[0][1][:80]!r}",
            path=path,
            record=f"line {head[0][0]}",
        )
    return best


def read_syslog(
    paths: Paths, format: str = "auto", *, errors: str = "count", year: int = 2000
) -> SyslogRead:
    """Read syslog files (or directories of them) into one :class:`SyslogRead`.

    ``format`` is one of :data:`FORMATS`; ``errors`` is ``count`` (unparsable lines are
    counted) or ``raise``. See the module docstring for times.
    """
    if format not in FORMATS:
        raise ConfigError(f"unknown syslog format {format!r}: expected one of {FORMATS}")
    if errors not in ("count", "raise"):
        raise ConfigError(f"errors must be 'count' or 'raise', not {errors!r}")
    files = [str(f) for f in input_files(paths, SUFFIXES)]
    return _parse([(f, read_text(f).splitlines()) for f in files], format, errors, year)


def parse_syslog_text(
    text: str,
    format: str = "auto",
    *,
    source: str = "<text>",
    errors: str = "count",
    year: int = 2000,
) -> SyslogRead:
    """Parse syslog lines held in memory (``source`` names them in errors)."""
    if format not in FORMATS:
        raise ConfigError(f"unknown syslog format {format!r}: expected one of {FORMATS}")
    return _parse([(source, text.splitlines())], format, errors, year)


def _parse(sources: list[tuple[str, list[str]]], format: str, errors: str, year: int) -> SyslogRead:
    times: list[int] = []
    hosts: list[str] = []
    content: list[str] = []
    apps: list[str] = []
    line_no: list[int] = []
    file_no: list[int] = []
    acc = {"lines": 0, "parsed": 0, "blank": 0, "unparsed": 0}
    formats: dict[str, str] = {}
    unparsed: list[str] = []
    for fi, (path, lines) in enumerate(sources):
        fmt = detect_syslog_format(lines, path) if format == "auto" else format
        formats[path] = fmt
        pattern, to_time = _PATTERNS[fmt], _TIMES[fmt]
        for n, raw in enumerate(lines, 1):
            acc["lines"] += 1
            ln = raw.rstrip("\r")
            if not ln.strip():
                acc["blank"] += 1
                continue
            m = pattern.fullmatch(ln)
            reason = None
            if m is None:
                reason = f"not a {fmt} line"
            else:
                try:
                    t = to_time(m, year)
                except ValueError as e:
                    reason = f"bad timestamp ({e})"
            if m is None or reason is not None:
                if errors == "raise":
                    raise InputError(f"{reason}: {ln[:80]!r}", path=path, record=f"line {n}")
                acc["unparsed"] += 1
                if len(unparsed) < 20:
                    unparsed.append(f"{path}:{n}")
                continue
            times.append(t)
            hosts.append(m["host"] or "-")
            content.append((m["msg"] or "").strip())
            apps.append(m["app"] or "")
            line_no.append(n)
            file_no.append(fi)
            acc["parsed"] += 1
    devices, device = np.unique(np.asarray(hosts, dtype=str), return_inverse=True)
    records = SyslogRecords(
        time=np.asarray(times, dtype=np.int64),
        device=device.astype(np.int32),
        devices=[str(d) for d in devices],
        content=content,
        app=apps,
        line=np.asarray(line_no, dtype=np.int64),
        file=np.asarray(file_no, dtype=np.int32),
        files=[p for p, _ in sources],
    )
    return SyslogRead(records, acc, formats, unparsed)


def format_rfc5424(time_ns: int, host: str, app: str, message: str, pri: int = 13) -> str:
    """One RFC 5424 line (no structured data), for writing test and simulated syslogs."""
    t = datetime.fromtimestamp(time_ns // S, tz=UTC).replace(microsecond=(time_ns % S) // 1000)
    return f"<{pri}>1 {t.isoformat().replace('+00:00', 'Z')} {host} {app} - - - {message}"


RPC_COLUMNS = ("time_ns", "src", "dst", "one_way_ns", "end_to_end_ns")
"""The columns of an RPC delay table (CSV with a header), the input that syslog diagnosis
attaches network problems to: send time, endpoints (topology node names), one-way delay and
end-to-end latency, all in ns."""


@dataclass
class RpcDelays:
    """RPC delay columns (see :data:`RPC_COLUMNS`)."""

    time: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    one_way_ns: np.ndarray
    end_to_end_ns: np.ndarray


def read_rpc_csv(path: str | Path) -> RpcDelays:
    """Read an RPC delay table; a missing column or a non-integer cell is an error naming it."""
    rows = [row for _, row in csv_rows(path)]
    if not rows:
        raise InputError("empty RPC table", path=str(path))
    header = [h.strip() for h in rows[0]]
    missing = [c for c in RPC_COLUMNS if c not in header]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}", path=str(path), record="line 1")
    pos = [header.index(c) for c in RPC_COLUMNS]
    cols: list[list] = [[] for _ in RPC_COLUMNS]
    for n, row in enumerate(rows[1:], 2):
        if not any(cell.strip() for cell in row):
            continue
        try:
            cells = [row[i].strip() for i in pos]
            times = [int(cells[0]), int(cells[3]), int(cells[4])]
            if not all(-(2**63) <= t < 2**63 for t in times):
                raise ValueError("a time beyond int64 nanoseconds")
            values = [times[0], cells[1], cells[2], times[1], times[2]]
        except (IndexError, ValueError) as e:
            raise InputError(f"bad RPC row ({e})", path=str(path), record=f"line {n}") from None
        for c, v in zip(cols, values, strict=True):
            c.append(v)
    return RpcDelays(
        np.asarray(cols[0], np.int64),
        np.asarray(cols[1], dtype=object),
        np.asarray(cols[2], dtype=object),
        np.asarray(cols[3], np.int64),
        np.asarray(cols[4], np.int64),
    )


def read_loghub_truth(path: str | Path, lines: np.ndarray) -> np.ndarray:
    """The true template (``EventId``) of each of ``lines`` (1-based line numbers of the log)
    from a loghub ``*_structured.csv``; a line the table lacks is an error naming it."""
    rows = csv_rows(path)
    header = next(rows, (0, []))[1]
    if not {"LineId", "EventId"} <= set(header):
        raise InputError("not a loghub structured CSV (needs LineId, EventId)", path=str(path))
    at, ev = header.index("LineId"), header.index("EventId")
    event = {}
    for line, row in rows:
        if not row:
            continue
        try:
            event[int(row[at])] = row[ev]
        except (IndexError, ValueError):
            raise InputError(
                "no LineId or EventId", path=str(path), record=f"line {line}"
            ) from None
    missing = [int(n) for n in lines if int(n) not in event]
    if missing:
        raise InputError("line has no true template", path=str(path), record=f"line {missing[0]}")
    return np.asarray([event[int(n)] for n in lines], dtype=object)

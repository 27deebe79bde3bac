"""Device syslogs read into :class:`~tacit.model.syslog_records.SyslogRecords`: RFC 5424, RFC
3339 lines (rsyslog's default file format), RFC 3164 (BSD), systemd journal exports, the loghub
sample formats, and lines of a syntax the user describes.

YTrace (Kanuparthy et al., arXiv 1602.03273, §4 "network") diagnoses the network from the
syslogs of its devices; the first step is to read them. The format of a file is detected from
its content: a journal export by its first entry (:func:`tacit.formats.journal.detect_journal`),
otherwise the line format most of its first lines match; a file none of whose first lines
matches is an :class:`~tacit.errors.InputError` naming the first line. One line (one entry of a
journal export) is one record. Records that cannot be read are counted as ``unparsed`` with
their file, line and reason, or, with ``errors="raise"``, the first of them is an error naming
its file and line.

Times are int64 nanoseconds UTC:

- ``rfc5424`` (``<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG``) and ``rfc3339``
  (``TIMESTAMP HOST TAG: MSG``, rsyslog's ``RSYSLOG_FileFormat``) carry RFC 3339 timestamps
  (RFC 5424 §6.2.3, RFC 3339 §5.6): the UTC offset is applied, fractional seconds are kept to
  the nanosecond, and a time without an offset, or a leap second, is a bad timestamp.
- ``rfc3164`` (``Mmm dd hh:mm:ss HOST TAG: MSG``, RFC 3164 §4.1.2) carries neither year nor
  zone: times are read in UTC and the year comes from ``year`` (the year of the file's first
  line) or else from the file's modification time (the year of its last line: the
  modification time's year, or the year before when that line's month is later than the
  modification time's month). Inside a file, a step back of more than six months (Dec → Jan)
  starts the next year. Text read from memory has no modification time: without ``year`` such
  lines are an error. :attr:`SyslogRead.years` says, per file, which years were used and why.
- ``journal-export`` and ``journal-json`` (``journalctl -o export`` / ``-o json``): the entry's
  ``__REALTIME_TIMESTAMP`` (µs); the device is ``_HOSTNAME``, the app ``SYSLOG_IDENTIFIER``
  (else ``_COMM``), the message ``MESSAGE`` (its first value, binary ones decoded as UTF-8 with
  undecodable bytes escaped).
- The loghub formats are the ``log_format`` strings of the loghub benchmark (BGL, HPC,
  Thunderbird; Linux and OpenSSH are RFC 3164 without a priority); the message is what loghub
  calls ``Content``.
- :func:`line_format` describes any other line syntax: a regular expression with named groups
  and how its ``time`` group reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from tacit.digits import ascii_digits
from tacit.errors import ConfigError, InputError
from tacit.formats import journal
from tacit.formats.common import Paths, input_files
from tacit.formats.textio import HEAD_BYTES, csv_rows, read_bytes, read_head, read_text
from tacit.model.syslog_records import SyslogRecords

SUFFIXES = (
    *(".log", ".log.gz", ".syslog", ".syslog.gz", ".txt", ".txt.gz"),
    *(".export", ".export.gz", ".json", ".json.gz", ".jsonl", ".jsonl.gz"),
)
"""The files :func:`read_syslog` takes from a directory."""
DETECT_LINES = 20
"""How many non-blank first lines decide a file's format."""
MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTHS = {m: i for i, m in enumerate(MONTH_NAMES, 1)}
NEW_YEAR_STEP = 6
"""A year-less time whose month is more than this many months before the previous line's
starts the next year (Dec → Jan); a smaller step back is lines slightly out of order."""
S = 1_000_000_000
MAX_UNPARSED = 20
"""How many unparsed records :attr:`SyslogRead.unparsed_lines` names."""
_EPOCH_DAY = datetime(1970, 1, 1).toordinal()
_LEAP_YEAR = 2000
"""The year a year-less strptime time is parsed in: a leap year, so that Feb 29 parses."""
_MAX_DAY = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_YEARS_IN_NS = (1678, 2261)
"""The whole years int64 nanoseconds since 1970 hold."""


Yearless = tuple[int, int, int]
"""A time read without its year: (month, day, time of day in ns with the UTC offset taken
off); the reader gives it its year. A plain tuple: one is made per RFC 3164 line."""


TimeReader = Callable[[re.Match[str]], int | Yearless]
"""The time of a matched line: int64 ns UTC, or a :data:`Yearless` time."""


@dataclass(frozen=True)
class LineFormat:
    """A line syntax: ``pattern`` matches a whole line, with the named groups ``host``,
    ``app`` and ``message`` (each optional), and ``time`` reads its time."""

    name: str
    pattern: re.Pattern[str]
    time: TimeReader


Format = str | LineFormat
"""A name in :data:`FORMATS`, or a :func:`line_format`."""


@dataclass
class SyslogRead:
    """Records, with ``accounting`` (``lines``: lines read, an entry counting as one line in a
    journal export; ``parsed``, ``blank``, ``unparsed``: they add up to ``lines``), the format
    of each file, the years given to year-less times per file (``years``: see the module
    docstring) and the first unparsed records as ``file:line: reason``."""

    records: SyslogRecords
    accounting: dict[str, int]
    formats: dict[str, str]
    unparsed_lines: list[str]
    years: dict[str, str] = field(default_factory=dict)


def _checked(ns: int) -> int:
    if not -(2**63) <= ns < 2**63:
        raise ValueError("beyond int64 nanoseconds (years 1678 to 2262)")
    return ns


def _day_ns(t: datetime) -> int:
    """The time of day of ``t`` in ns, its UTC offset taken off (UTC when naive)."""
    ns = ((t.hour * 60 + t.minute) * 60 + t.second) * S + t.microsecond * 1000
    offset = t.utcoffset()
    return ns if offset is None else ns - offset // timedelta(microseconds=1) * 1000


def _ns(t: datetime) -> int:
    """``t`` (UTC when naive) in int64 ns since the epoch, exactly."""
    return _checked((t.toordinal() - _EPOCH_DAY) * 86400 * S + _day_ns(t))


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):?(\d{2}))?"
)


def rfc3339_ns(text: str, *, offset_required: bool = True) -> int:
    """An RFC 3339 timestamp (RFC 3339 §5.6; ISO 8601's extended form) in int64 ns UTC: the
    offset applied, the fraction kept to the nanosecond (digits past the ninth dropped). A
    time without an offset is UTC unless ``offset_required``; a ValueError says what is
    wrong."""
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    y, mo, d, h, mi, s = map(int, m.groups()[:6])
    if m[8] is None and m[9] is None:
        if offset_required:
            raise ValueError(f"no UTC offset: {text!r}")
        offset = 0
    elif m[8] is not None:
        offset = 0
    else:
        oh, om = int(m[10]), int(m[11])
        if oh > 23 or om > 59:
            raise ValueError(f"bad UTC offset: {text!r}")
        offset = (oh * 3600 + om * 60) * (1 if m[9] == "+" else -1)
    whole = _ns(datetime(y, mo, d, h, mi, s, tzinfo=UTC)) - offset * S
    return _checked(whole + int((m[7] or "")[:9].ljust(9, "0")))


_DECIMAL = re.compile(r"(-?)(\d+)(?:\.(\d*))?")


def decimal_ns(text: str, unit_ns: int) -> int:
    """A decimal number of ``unit_ns`` units (``1700000000.25`` seconds, say) in int64 ns,
    exactly: no binary floating point on the way."""
    if ascii_digits(text):
        return _checked(int(text) * unit_ns)
    m = _DECIMAL.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a number: {text!r}")
    digits = m[3] or ""
    value = int(m[2] + digits) * unit_ns // 10 ** len(digits)
    return _checked(-value if m[1] else value)


def _time_rfc3339(m: re.Match[str]) -> int:
    return rfc3339_ns(m["time"])


def _time_3164(m: re.Match[str]) -> Yearless:
    month = MONTHS.get(m["mon"])
    if month is None:
        raise ValueError(f"unknown month {m['mon']!r}")
    day, hms = int(m["day"]), m["hms"]
    h, mi, s = int(hms[:2]), int(hms[3:5]), int(hms[6:])
    if not 1 <= day <= _MAX_DAY[month - 1]:
        raise ValueError(f"no {m['mon']} {day}")
    if h > 23 or mi > 59 or s > 59:
        raise ValueError(f"no time {hms}")
    return month, day, ((h * 60 + mi) * 60 + s) * S


def _time_bgl(m: re.Match[str]) -> int:
    return _ns(datetime.strptime(m["time"], "%Y-%m-%d-%H.%M.%S.%f"))


def _time_epoch(m: re.Match[str]) -> int:
    return decimal_ns(m["time"], S)


_TAG = r"(?P<app>.*?)(?:\[(?P<pid>\d+)\])?: (?P<message>.*)"
LINE_FORMATS = {
    f.name: f
    for f in (
        LineFormat(
            "rfc5424",
            re.compile(
                r"<(?P<pri>\d{1,3})>1 (?P<time>\S+) (?P<host>\S+) (?P<app>\S+) (?P<pid>\S+) \S+ "
                r"(?P<sd>-|(?:\[(?:[^\]\\]|\\.)*\])+)(?: (?P<message>.*))?"
            ),
            _time_rfc3339,
        ),
        LineFormat(
            "rfc3339",
            re.compile(r"(?P<time>\d{4}-\d{2}-\d{2}T\S+) (?P<host>\S+) " + _TAG),
            _time_rfc3339,
        ),
        LineFormat(
            "rfc3164",
            re.compile(
                r"(?:<(?P<pri>\d{1,3})>)?(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d{1,2}) "
                r"(?P<hms>\d{2}:\d{2}:\d{2}) (?P<host>\S+) " + _TAG
            ),
            _time_3164,
        ),
        LineFormat(
            "bgl",
            re.compile(
                r"\S+ \d+ \d{4}\.\d{2}\.\d{2} (?P<host>\S+) "
                r"(?P<time>\d{4}-\d{2}-\d{2}-\d{2}\.\d{2}\.\d{2}\.\d{6}) "
                r"\S+ \S+ (?P<app>\S+) \S+ ?(?P<message>.*)"
            ),
            _time_bgl,
        ),
        LineFormat(
            "hpc",
            re.compile(r"\d+ (?P<host>\S+) (?P<app>\S+) \S+ (?P<time>\d+) -?\d+ (?P<message>.*)"),
            _time_epoch,
        ),
        LineFormat(
            "thunderbird",
            re.compile(
                r"\S+ (?P<time>\d+) \d{4}\.\d{2}\.\d{2} (?P<host>\S+) [A-Z][a-z]{2} +\d{1,2} "
                r"\d{2}:\d{2}:\d{2} \S+ " + _TAG
            ),
            _time_epoch,
        ),
    )
}
"""The built-in line formats, in the order that breaks a tie when detecting."""
FORMATS = ("auto", *LINE_FORMATS, journal.EXPORT, journal.JSON)
LINE_GROUPS = ("time", "host", "app", "pid", "message")
"""The named groups a :func:`line_format` expression may have (``time`` and ``message`` it
must); ``pid`` is matched but not kept, as records have no process column."""
TIME_FORMATS = ("iso", "epoch", "epoch_ms")
"""The named ways a :func:`line_format` time reads; anything else is a strptime format."""
_YEAR_DIRECTIVES = set("YyGcx")
_MONTH_DIRECTIVES = set("bBm")


def line_format(regex: str, time_format: str = "iso") -> LineFormat:
    """A :class:`LineFormat` for logs no built-in format reads (a :class:`ConfigError` saying
    what is wrong otherwise). ``regex`` must match a whole line and name the groups ``time``
    and ``message``, and may name ``host``, ``app`` and ``pid`` (:data:`LINE_GROUPS`).
    ``time_format`` says how ``time`` reads: ``iso`` (RFC 3339 / ISO 8601, UTC when it has no
    offset), ``epoch`` or ``epoch_ms`` (decimal seconds or milliseconds since 1970), or a
    :func:`~datetime.datetime.strptime` format (UTC unless it has ``%z``); a strptime format
    without a year (``%b %d %H:%M:%S``) is year-less, its year found as RFC 3164's is."""
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise ConfigError(f"line regex {regex!r} is not a regular expression: {e}") from None
    names = set(pattern.groupindex)
    missing = [g for g in ("time", "message") if g not in names]
    unknown = sorted(names - set(LINE_GROUPS))
    if missing or unknown:
        raise ConfigError(
            f"line regex {regex!r}: "
            + "; ".join(
                [f"no (?P<{g}>...) group" for g in missing]
                + [f"unknown group {g!r} (expected {', '.join(LINE_GROUPS)})" for g in unknown]
            )
        )
    return LineFormat("custom", pattern, _time_reader(time_format))


def _time_reader(time_format: str) -> TimeReader:
    if time_format == "iso":
        return lambda m: rfc3339_ns(m["time"], offset_required=False)
    if time_format in ("epoch", "epoch_ms"):
        unit = S if time_format == "epoch" else 1_000_000
        return lambda m: decimal_ns(m["time"], unit)
    directives = set(re.findall(r"%(.)", time_format))
    sample = datetime(2004, 11, 23, 13, 4, 5, 678901, tzinfo=UTC).strftime(time_format)
    try:
        datetime.strptime(sample, time_format)
    except ValueError as e:
        raise ConfigError(
            f"time format {time_format!r} is neither {', '.join(TIME_FORMATS)} nor a strptime "
            f"format that reads what it writes ({e})"
        ) from None
    if directives & _YEAR_DIRECTIVES:
        return lambda m: _ns(datetime.strptime(m["time"], time_format))
    if not directives & _MONTH_DIRECTIVES:
        raise ConfigError(
            f"time format {time_format!r} has no year and no month (%Y, %b, %m, ...): "
            "it does not date a line"
        )
    # Parsed in a leap year, as RFC 3164 times are, so that Feb 29 reads; the year comes later.
    with_year = f"%Y {time_format}"

    def yearless(m: re.Match[str]) -> Yearless:
        t = datetime.strptime(f"{_LEAP_YEAR} {m['time']}", with_year)
        return t.month, t.day, _day_ns(t)

    return yearless


def detect_syslog_format(lines: list[str], path: str = "<text>") -> str:
    """The line format most of the first :data:`DETECT_LINES` non-blank ``lines`` match (the
    first in :data:`LINE_FORMATS` order on a tie); an :class:`InputError` naming the first line
    if none does."""
    head = [(i, ln) for i, ln in enumerate(lines, 1) if ln.strip()][:DETECT_LINES]
    if not head:
        raise InputError("empty syslog file", path=path)
    scores = {
        name: sum(bool(f.pattern.fullmatch(ln.rstrip("\r"))) for _, ln in head)
        for name, f in LINE_FORMATS.items()
    }
    best = max(scores, key=lambda f: scores[f])
    if scores[best] == 0:
        raise InputError(
            f"unknown syslog format (expected one of {', '.join(FORMATS[1:])}): "
            f"{head[0][1][:80]!r}",
            path=path,
            record=f"line {head[0][0]}",
        )
    return best


def _check_options(format: Format, errors: str) -> None:
    if isinstance(format, str) and format not in FORMATS:
        raise ConfigError(f"unknown syslog format {format!r}: expected one of {FORMATS}")
    if errors not in ("count", "raise"):
        raise ConfigError(f"errors must be 'count' or 'raise', not {errors!r}")


def read_syslog(
    paths: Paths, format: Format = "auto", *, errors: str = "count", year: int | None = None
) -> SyslogRead:
    """Read syslog files (or directories of them) into one :class:`SyslogRead`.

    ``format`` is one of :data:`FORMATS` or a :func:`line_format`; ``errors`` is ``count``
    (records that cannot be read are counted) or ``raise``; ``year`` is the year of the first
    year-less time of each file (default: from the file's modification time). See the module
    docstring for times.
    """
    _check_options(format, errors)
    sources = []
    for f in input_files(paths, SUFFIXES):
        fmt = format
        if fmt == "auto":
            fmt = journal.detect_journal(read_head(f)) or "auto"
        modified = datetime.fromtimestamp(f.stat().st_mtime_ns // S, UTC)
        if fmt in (journal.EXPORT, journal.JSON):
            sources.append(_Source(str(f), fmt, read_bytes(f), modified))
        else:
            sources.append(_Source(str(f), fmt, read_text(f), modified))
    return _parse(sources, errors, year)


def parse_syslog_text(
    text: str,
    format: Format = "auto",
    *,
    source: str = "<text>",
    errors: str = "count",
    year: int | None = None,
) -> SyslogRead:
    """Parse syslog lines held in memory (``source`` names them in errors). Year-less times
    need ``year``: text has no modification time to date them."""
    _check_options(format, errors)
    fmt = format
    if fmt == "auto":
        fmt = journal.detect_journal(text[:HEAD_BYTES].encode()) or "auto"
    data = text.encode() if fmt == journal.EXPORT else text
    return _parse([_Source(source, fmt, data, None)], errors, year)


@dataclass
class _Source:
    """One input: its text, or its bytes for a journal export (binary fields)."""

    path: str
    format: Format
    data: str | bytes
    modified: datetime | None


@dataclass
class _FileRead:
    """What one file yields: record columns (a year-less time holds 0 in ``time`` until it
    is dated, and is listed in ``yearless`` with its row), and the unread records as (line,
    reason)."""

    format: str
    lines: int = 0
    blank: int = 0
    line: list[int] = field(default_factory=list)
    time: list[int] = field(default_factory=list)
    host: list[str] = field(default_factory=list)
    app: list[str] = field(default_factory=list)
    message: list[str] = field(default_factory=list)
    yearless: list[tuple[int, Yearless]] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)

    def add(self, line: int, time: int | Yearless, host: str, app: str, message: str) -> None:
        if isinstance(time, tuple):
            self.yearless.append((len(self.time), time))
            time = 0
        self.line.append(line)
        self.time.append(time)
        self.host.append(host)
        self.app.append(app)
        self.message.append(message)

    def drop(self, rows: set[int]) -> None:
        """Leave out ``rows`` (indices), found unreadable after the fact."""
        keep = [i for i in range(len(self.time)) if i not in rows]
        self.line = [self.line[i] for i in keep]
        self.time = [self.time[i] for i in keep]
        self.host = [self.host[i] for i in keep]
        self.app = [self.app[i] for i in keep]
        self.message = [self.message[i] for i in keep]


def _read_lines(text: str, fmt: LineFormat) -> _FileRead:
    out = _FileRead(fmt.name)
    lines = text.splitlines()
    out.lines = len(lines)
    match, time, add = fmt.pattern.fullmatch, fmt.time, out.add
    for n, raw in enumerate(lines, 1):
        ln = raw.rstrip("\r")
        if not ln.strip():
            out.blank += 1
            continue
        m = match(ln)
        if m is None:
            out.bad.append((n, f"not a {fmt.name} line: {ln[:80]!r}"))
            continue
        try:
            t = time(m)
        except ValueError as e:
            out.bad.append((n, f"bad timestamp ({e}): {ln[:80]!r}"))
            continue
        g = m.groupdict()
        add(n, t, g.get("host") or "-", g.get("app") or "", (g.get("message") or "").strip())
    return out


def _journal_record(read: _FileRead, line: int, entry: journal.Entry) -> None:
    """Add the record of one journal entry to ``read``; a ValueError says why there is none."""

    def first(name: str) -> str | None:
        value = next((v for v in entry.get(name, []) if v is not None), None)
        return None if value is None else value.decode("utf-8", "backslashreplace")

    stamp = first("__REALTIME_TIMESTAMP")
    if stamp is None:
        raise ValueError("entry has no __REALTIME_TIMESTAMP")
    if not ascii_digits(stamp):
        raise ValueError(f"__REALTIME_TIMESTAMP is not a count of microseconds: {stamp!r}")
    message = first("MESSAGE")
    if message is None:
        left_out = "MESSAGE" in entry
        raise ValueError(
            "MESSAGE left out by journalctl (over 4096 bytes; export with --all)"
            if left_out
            else "entry has no MESSAGE"
        )
    app = first("SYSLOG_IDENTIFIER") or first("_COMM") or ""
    read.add(line, decimal_ns(stamp, 1000), first("_HOSTNAME") or "-", app, message.strip())


def _read_journal_export(data: bytes, path: str) -> _FileRead:
    out = _FileRead(journal.EXPORT)
    for line, entry in journal.export_entries(data, path):
        out.lines += 1
        try:
            _journal_record(out, line, entry)
        except ValueError as e:
            out.bad.append((line, str(e)))
    return out


def _read_journal_json(text: str) -> _FileRead:
    """Lines end at ``\\n`` only: a JSON string may hold U+2028 unescaped."""
    out = _FileRead(journal.JSON)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    for n, ln in enumerate(lines, 1):
        out.lines += 1
        if not ln.strip():
            out.blank += 1
            continue
        try:
            _journal_record(out, n, journal.json_entry(ln))
        except ValueError as e:
            out.bad.append((n, str(e)))
    return out


def _read_source(src: _Source) -> _FileRead:
    if isinstance(src.data, bytes):
        return _read_journal_export(src.data, src.path)
    if src.format == journal.JSON:
        return _read_journal_json(src.data)
    fmt = src.format
    if fmt == "auto":
        fmt = detect_syslog_format(src.data.splitlines(), src.path)
    return _read_lines(src.data, LINE_FORMATS[fmt] if isinstance(fmt, str) else fmt)


def _date_years(read: _FileRead, src: _Source, year: int | None) -> str | None:
    """Give the year-less times of ``read`` their year (see the module docstring); rows whose
    date does not exist in it (Feb 29) move to ``read.bad``. Returns what was used, for
    :attr:`SyslogRead.years`, or None when no time was year-less."""
    if not read.yearless:
        return None
    rows = np.asarray([i for i, _ in read.yearless])
    month, day, ns = np.asarray([t for _, t in read.yearless], dtype=np.int64).T
    new_year = month[:-1] - month[1:] > NEW_YEAR_STEP
    steps = np.concatenate([[0], np.cumsum(new_year)])
    turns = [read.line[i] for i in rows[1:][new_year]]
    if year is not None:
        first, why = year, "given"
    elif src.modified is not None:
        first = src.modified.year - int(month[-1] > src.modified.month) - len(turns)
        why = f"from the file's modification time, {src.modified:%Y-%m-%d}"
    else:
        raise InputError(
            "times without a year (RFC 3164) and no year given: give the year of the first line",
            path=src.path,
            record=f"line {read.line[rows[0]]}",
        )
    years = first + steps
    ok = (years >= _YEARS_IN_NS[0]) & (years <= _YEARS_IN_NS[1])
    month_start = ((np.where(ok, years, 1970) - 1970) * 12 + month - 1).astype("datetime64[M]")
    first_day = month_start.astype("datetime64[D]")
    ok &= day <= ((month_start + 1).astype("datetime64[D]") - first_day).astype(np.int64)
    times = (first_day.astype(np.int64) + day - 1) * (86400 * S) + ns
    for i, t in zip(rows[ok].tolist(), times[ok].tolist(), strict=True):
        read.time[i] = t
    if not ok.all():
        for i, y, m, d in zip(*(c[~ok].tolist() for c in (rows, years, month, day)), strict=True):
            read.bad.append((read.line[i], f"bad timestamp (no {MONTH_NAMES[m - 1]} {d} in {y})"))
        read.drop(set(rows[~ok].tolist()))
    span = str(first) if not turns else f"{first}-{first + len(turns)}"
    at = f"; a new year at line {', '.join(map(str, turns))}" if turns else ""
    return f"{span} ({why}{at})"


def _parse(sources: Iterable[_Source], errors: str, year: int | None) -> SyslogRead:
    times: list[int] = []
    hosts: list[str] = []
    content: list[str] = []
    apps: list[str] = []
    line_no: list[int] = []
    file_no: list[int] = []
    acc = {"lines": 0, "parsed": 0, "blank": 0, "unparsed": 0}
    formats: dict[str, str] = {}
    years: dict[str, str] = {}
    unparsed: list[str] = []
    paths: list[str] = []
    for fi, src in enumerate(sources):
        paths.append(src.path)
        read = _read_source(src)
        formats[src.path] = read.format
        dated = _date_years(read, src, year)
        if dated is not None:
            years[src.path] = dated
        read.bad.sort()
        if read.bad and errors == "raise":
            n, reason = read.bad[0]
            raise InputError(reason, path=src.path, record=f"line {n}")
        acc["lines"] += read.lines
        acc["blank"] += read.blank
        acc["unparsed"] += len(read.bad)
        acc["parsed"] += len(read.time)
        named = read.bad[: MAX_UNPARSED - len(unparsed)]
        unparsed.extend(f"{src.path}:{n}: {why}" for n, why in named)
        times.extend(read.time)
        hosts.extend(read.host)
        content.extend(read.message)
        apps.extend(read.app)
        line_no.extend(read.line)
        file_no.extend([fi] * len(read.line))
    devices, device = np.unique(np.asarray(hosts, dtype=str), return_inverse=True)
    records = SyslogRecords(
        time=np.asarray(times, dtype=np.int64),
        device=device.astype(np.int32),
        devices=[str(d) for d in devices],
        content=content,
        app=apps,
        line=np.asarray(line_no, dtype=np.int64),
        file=np.asarray(file_no, dtype=np.int32),
        files=paths,
    )
    return SyslogRead(records, acc, formats, unparsed, years)


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

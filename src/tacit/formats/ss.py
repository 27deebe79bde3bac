"""TCP connection statistics as ``ss -tin`` prints them (iproute2), read into a table
(:class:`~tacit.model.tcp_info.TcpInfoTable`).

``ss -i`` prints the kernel's ``tcp_info`` of each socket as ``key:value`` tokens after the
connection line (on a tab-indented continuation line, or on the same line with ``-O``). This
reader keeps the fields YTrace's client/Internet-path diagnosis needs — smoothed RTT and its
variation, RTO, congestion window, retransmissions, bytes acknowledged — and converts their
milliseconds to int64 nanoseconds. Files may hold several snapshots: each ``State Recv-Q ...``
header starts a new one, and a line holding a bare number (``date +%s.%N`` before each
``ss -tin`` in a sampling loop) gives the Unix time of the snapshot after it.

Every line is accounted for: a header, a timestamp, a connection, its statistics, or blank.
Tokens this reader does not use (new ``ss`` versions add fields) are counted, not errors; a
known field with a malformed value is an :class:`~tacit.errors.InputError` naming the line.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tacit.errors import InputError
from tacit.formats.socketevents import seconds_to_ns
from tacit.formats.textio import read_text
from tacit.model.columns import NONE, StringPool, typed_columns
from tacit.model.tcp_info import TcpInfoTable

MS = 1_000_000
"""Nanoseconds per millisecond: ``ss`` prints its times in milliseconds."""

STATES = frozenset(
    {
        "ESTAB",
        "SYN-SENT",
        "SYN-RECV",
        "FIN-WAIT-1",
        "FIN-WAIT-2",
        "TIME-WAIT",
        "UNCONN",
        "CLOSE-WAIT",
        "LAST-ACK",
        "LISTEN",
        "CLOSING",
        "CLOSED",
    }
)
"""The state names ``ss`` prints in its first column (absent with a ``state`` filter)."""

FLAGS = frozenset({"ts", "sack", "ecn", "ecnseen", "fastopen", "app_limited", "<->", "->", "<-"})
"""Bare words of the statistics that are options, not the congestion control algorithm."""

TIME_MS = {"rto": "rto", "ato": "ato", "minrtt": "minrtt", "rcv_rtt": "rcv_rtt"}
"""``key:MILLISECONDS`` fields (fractional) → column."""
LAST_MS = {"lastsnd": "lastsnd", "lastrcv": "lastrcv", "lastack": "lastack"}
"""``key:MILLISECONDS`` fields (integer ages) → column."""
COUNTS = {
    "cwnd": "cwnd",
    "ssthresh": "ssthresh",
    "mss": "mss",
    "bytes_sent": "bytes_sent",
    "bytes_retrans": "bytes_retrans",
    "bytes_acked": "bytes_acked",
    "bytes_received": "bytes_received",
    "segs_out": "segs_out",
    "segs_in": "segs_in",
    "data_segs_out": "data_segs_out",
    "data_segs_in": "data_segs_in",
    "lost": "lost",
    "unacked": "unacked",
    "notsent": "notsent",
}
"""``key:INTEGER`` fields → column."""
RATES = {"send": "send_bps", "delivery_rate": "delivery_bps", "pacing_rate": "pacing_bps"}
"""``key RATEbps`` fields (value in the next token) → column."""
ZERO_WHEN_ABSENT = ("retrans_now", "retrans_total", "bytes_retrans", "lost", "unacked", "notsent")
"""Columns ``ss`` prints only when nonzero (iproute2 ``tcp_show_info``): 0, not absent, on a
row that has statistics."""

_HEADER = re.compile(r"^(Netid\s+)?(State\s+)?Recv-Q\s+Send-Q\s")
NETIDS = frozenset({"tcp", "mptcp"})
"""First column of ``ss -in`` output without ``-t`` (``Netid``)."""
_NUMBER = re.compile(r"^[+-]?\d+(\.\d*)?$")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)([KMG]?)bps$")
_RATE_SCALE = {"": 1, "K": 1_000, "M": 1_000_000, "G": 1_000_000_000}


@dataclass
class SsRead:
    """What :func:`read_ss` returns: the rows and how every input line was used."""

    table: TcpInfoTable
    accounting: dict[str, int]
    """Counts of lines by use (``header``, ``timestamp``, ``connection``, ``statistics``,
    ``blank``) and of ``unused_tokens`` (statistics this reader does not keep)."""


def read_ss(path: str | Path) -> SsRead:
    """The connections in a file of ``ss -tin`` output (gzip allowed)."""
    return parse_ss(read_text(path), source=str(path))


def parse_ss(text: str, source: str = "<ss>") -> SsRead:
    """The connections in ``ss -tin`` output ``text`` (``source`` names it in errors)."""
    parser = _Parser(source)
    for lineno, line in enumerate(text.splitlines(), start=1):
        parser.line(lineno, line)
    return SsRead(parser.table(), dict(parser.accounting))


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.strings = StringPool()
        self.rows: list[dict[str, int]] = []
        self.accounting: Counter[str] = Counter()
        self.sample = -1
        self.time = NONE
        self.pending_time = NONE
        self.open: dict[str, int] | None = None  # the connection awaiting its statistics

    def fail(self, lineno: int, message: str) -> InputError:
        return InputError(message, path=self.source, record=f"line {lineno}")

    def new_sample(self) -> None:
        self.sample += 1
        self.time, self.pending_time = self.pending_time, NONE

    def line(self, lineno: int, line: str) -> None:
        stripped = line.strip()
        if not stripped:
            self.accounting["blank"] += 1
        elif _HEADER.match(stripped):
            self.accounting["header"] += 1
            self.new_sample()
        elif _NUMBER.match(stripped):
            try:
                self.pending_time = seconds_to_ns(stripped)
            except ValueError as e:
                raise self.fail(lineno, str(e)) from None
            self.accounting["timestamp"] += 1
        elif line[0].isspace():
            if self.open is None:
                raise self.fail(lineno, "TCP statistics without a connection line before them")
            self.statistics(lineno, stripped.split(), self.open)
            self.accounting["statistics"] += 1
            self.open = None
        else:
            self.connection(lineno, stripped.split())

    def connection(self, lineno: int, tokens: list[str]) -> None:
        if tokens[0] in NETIDS:
            tokens.pop(0)
        state = tokens.pop(0) if tokens and tokens[0] in STATES else None
        if len(tokens) < 4 or not (tokens[0].isdigit() and tokens[1].isdigit()):
            raise self.fail(
                lineno, "not an ss line: expected [STATE] RECV-Q SEND-Q LOCAL PEER [statistics]"
            )
        if self.sample < 0 or self.pending_time != NONE:  # headerless (-H) output
            self.new_sample()
        row = {
            "sample": self.sample,
            "time": self.time,
            "line": lineno,
            "state": self.strings.code(state),
            "local": self.strings.code(tokens[2]),
            "peer": self.strings.code(tokens[3]),
            "recv_q": int(tokens[0]),
            "send_q": int(tokens[1]),
        }
        self.rows.append(row)
        self.accounting["connection"] += 1
        # With -O the statistics follow on the same line; with -e or -p socket details do.
        self.statistics(lineno, tokens[4:], row)
        self.open = row

    def statistics(self, lineno: int, tokens: list[str], row: dict[str, int]) -> None:  # noqa: C901
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            i += 1
            key, sep, value = tok.partition(":")
            try:
                if key in RATES and not sep and i < len(tokens):
                    row[RATES[key]] = _rate(tokens[i])
                    i += 1
                elif not sep:
                    if tok not in FLAGS and "cc" not in row:
                        row["cc"] = self.strings.code(tok)
                    elif tok not in FLAGS:
                        self.accounting["unused_tokens"] += 1
                elif key == "rtt":
                    rtt, _, var = value.partition("/")
                    row["rtt"], row["rttvar"] = _ms(rtt), _ms(var)
                elif key == "retrans":
                    now, _, total = value.partition("/")
                    row["retrans_now"], row["retrans_total"] = int(now), int(total)
                elif key in TIME_MS:
                    row[TIME_MS[key]] = _ms(value)
                elif key in LAST_MS:
                    row[LAST_MS[key]] = _ms(value)
                elif key in COUNTS:
                    row[COUNTS[key]] = int(value)
                else:
                    self.accounting["unused_tokens"] += 1
            except (ValueError, OverflowError):
                raise self.fail(lineno, f"malformed TCP statistic {tok!r}") from None

    def table(self) -> TcpInfoTable:
        for r in self.rows:
            if "rto" in r or "rtt" in r:
                for name in ZERO_WHEN_ABSENT:
                    r.setdefault(name, 0)
        lists = {name: [r.get(name, NONE) for r in self.rows] for name in TcpInfoTable.COLUMNS}
        lines = [f"line {r['line']}" for r in self.rows]
        cols = typed_columns(lists, TcpInfoTable.COLUMNS, lines, self.source)
        return TcpInfoTable(self.strings, **cols)


def _ms(text: str) -> int:
    """Milliseconds (``5.524``) → ns; ValueError when not a number."""
    return round(float(text) * MS)


def _rate(text: str) -> int:
    m = _RATE.match(text)
    if m is None:
        raise ValueError(text)
    return round(float(m.group(1)) * _RATE_SCALE[m.group(2)])

"""Message tables as CSV, JSON lines or Parquet: the reconciled input of WAP5 path analysis.

One message (WAP5, Reynolds et al., WWW '06, §2) per row, under these columns::

    sender,sender_endpoint,send_time,receiver,receiver_endpoint,receive_time,size,
    sender_host,receiver_host,flow

``sender``, ``receiver``, ``send_time`` and ``receive_time`` are required; the rest optional
(an absent endpoint is unknown, an absent size or flow -1, an absent host the node's name).
Extra columns are ignored.

**Times.** An empty cell or null is a missing time (the end was not traced: :data:`MISSING`);
every row needs at least one time, else :class:`~tacit.errors.InputError` names the row. Each
time column is read in one unit, decided from its values:

- all integers: nanoseconds since the epoch (what :func:`write_message_table` writes);
- any number with a fraction or exponent: seconds (decimal strings exactly to the nanosecond;
  JSON and Parquet floats to float precision, ~0.2 µs for present-day epoch times);
- ISO-8601 strings (``2024-05-01T10:00:00.000123456Z``, UTC without an offset, up to nine
  fractional digits), or a Parquet timestamp column.

A column mixing ISO strings and numbers is an error. A whole-seconds column written as
integers cannot be told from nanoseconds: write seconds with a fraction (``12.0``).

**Files.** The format follows the suffix (``.csv``, ``.jsonl``/``.ndjson``, ``.parquet``;
``.gz`` after CSV or JSON lines is gzip, also recognised by content), or, for other names, the
content (Parquet's ``PAR1`` magic, a JSON object on the first line, else CSV). Records are
numbered by line (CSV: the header is line 1) or, in Parquet, by row from 1.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tacit.errors import ConfigError, InputError
from tacit.formats.socketevents import iso_to_ns, seconds_to_ns
from tacit.formats.textio import csv_rows, iter_json_lines, read_bytes
from tacit.model.messages import MISSING, MessageTable
from tacit.model.spans import NONE, StringPool
from tacit.outputs import write_bytes

COLUMNS = (
    "sender",
    "sender_endpoint",
    "send_time",
    "receiver",
    "receiver_endpoint",
    "receive_time",
    "size",
    "sender_host",
    "receiver_host",
    "flow",
)
REQUIRED = ("sender", "receiver", "send_time", "receive_time")
TIME_FORMATS = ("ns", "iso", "seconds")
SUFFIXES = (".csv", ".csv.gz", ".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".parquet")
PARQUET_MAGIC = b"PAR1"

_INT = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def table_format(path: str | Path, head: bytes | None = None) -> str:
    """``csv``, ``jsonl`` or ``parquet``, from the suffix or else the content."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith(".csv"):
        return "csv"
    if head is None:
        head = _head(path)
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    return "jsonl" if head.lstrip().startswith(b"{") else "csv"


def _head(path: str | Path) -> bytes:
    try:
        with open(path, "rb") as f:
            if f.read(4) == PARQUET_MAGIC:
                return PARQUET_MAGIC
    except OSError:
        pass  # read_bytes names the problem
    return read_bytes(path)[:4096]


def read_message_table(path: str | Path) -> MessageTable:
    """Read one message table file (CSV, JSON lines or Parquet; see the module docstring)."""
    fmt = table_format(path)
    src = str(path)
    if fmt == "parquet":
        cols, records, where = _parquet_columns(path), None, "row"
    elif fmt == "jsonl":
        cols, records = _jsonl_columns(path)
        where = "line"
    else:
        cols, records = _csv_columns(path)
        where = "line"
    return _build(cols, records, src, where)


def _csv_columns(path: str | Path) -> tuple[dict[str, list], list[int]]:
    src = str(path)
    reader = csv_rows(path)
    first = next(reader, None)
    if first is None:
        raise InputError("empty file, expected a message table header", path=src)
    header = [h.strip() for h in first[1]]
    _check_header(header, src)
    index = {h: i for i, h in enumerate(header) if h in COLUMNS}
    cols: dict[str, list] = {h: [] for h in index}
    records: list[int] = []
    for line, row in reader:
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != len(header):
            raise InputError(
                f"{len(row)} fields, the header has {len(header)}", path=src, record=f"line {line}"
            )
        for h, i in index.items():
            cols[h].append(row[i])
        records.append(line)
    return cols, records


def _jsonl_columns(path: str | Path) -> tuple[dict[str, list], list[int]]:
    src = str(path)
    cols: dict[str, list] = {h: [] for h in COLUMNS}
    records: list[int] = []
    for lineno, obj in iter_json_lines(path):
        if not isinstance(obj, dict):
            raise InputError("a message must be a JSON object", path=src, record=f"line {lineno}")
        if not records and not {"sender", "receiver"} <= obj.keys():
            _check_header(list(obj), src)
        for h in COLUMNS:
            cols[h].append(obj.get(h))
        records.append(lineno)
    return cols, records


def _parquet_columns(path: str | Path) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = str(path)
    if not Path(path).is_file():
        raise InputError("no such file" if not Path(path).exists() else "not a file", path=src)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise InputError(f"cannot read Parquet: {e}", path=src) from None
    _check_header(table.column_names, src)
    return {h: table.column(h) for h in COLUMNS if h in table.column_names}


def _check_header(names: list[str], src: str) -> None:
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise InputError(
            f"not a message table: missing column(s) {', '.join(missing)} "
            f"(expected {','.join(COLUMNS)})",
            path=src,
        )


def _build(cols: dict[str, Any], records: list[int] | None, src: str, where: str) -> MessageTable:
    pool = StringPool()
    n = len(cols["sender"])
    rec = np.arange(1, n + 1, dtype=np.int64) if records is None else np.asarray(records)

    def fail(row: int, message: str) -> InputError:
        return InputError(message, path=src, record=f"{where} {int(rec[row])}")

    out: dict[str, np.ndarray] = {}
    for key, column in (("src", "sender"), ("dst", "receiver")):
        out[key] = _codes(cols[column], pool, fail, required=column)
    for key, column in (("src_endpoint", "sender_endpoint"), ("dst_endpoint", "receiver_endpoint")):
        out[key] = _codes(cols[column], pool, fail) if column in cols else np.full(n, NONE)
    for key, column, node in (
        ("src_host", "sender_host", "src"),
        ("dst_host", "receiver_host", "dst"),
    ):
        codes = _codes(cols[column], pool, fail) if column in cols else np.full(n, NONE)
        out[key] = np.where(codes == NONE, out[node], codes)
    out["send"] = _times(cols["send_time"], "send_time", fail)
    out["recv"] = _times(cols["receive_time"], "receive_time", fail)
    for key, column in (("size", "size"), ("flow", "flow")):
        out[key] = _integers(cols[column], column, fail) if column in cols else np.full(n, -1)
    bad = np.flatnonzero((out["send"] == MISSING) & (out["recv"] == MISSING))
    if len(bad):
        raise fail(int(bad[0]), "a message needs a send_time or a receive_time, both are empty")
    return MessageTable(pool, **out, record=rec, sources=[src])


def _values(column: Any) -> list:
    """A column as a Python list (Parquet columns converted)."""
    return column if isinstance(column, list) else column.to_pylist()


def _codes(column: Any, pool: StringPool, fail, required: str | None = None) -> np.ndarray:
    if not isinstance(column, list):  # Parquet: intern each distinct value once
        import pyarrow as pa
        import pyarrow.compute as pc

        column = column.combine_chunks()
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            column = column.cast(pa.string())
        enc = pc.dictionary_encode(column)
        recode = np.array(
            [pool.code(v or None) for v in enc.dictionary.to_pylist()] + [NONE], dtype=np.int32
        )
        codes = recode[enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)]
    else:
        codes = np.empty(len(column), dtype=np.int32)
        for i, v in enumerate(column):
            if v is None or v == "":
                codes[i] = NONE
            elif isinstance(v, str):
                codes[i] = pool.code(v)
            elif isinstance(v, int | float) and not isinstance(v, bool):
                codes[i] = pool.code(str(v))
            else:
                raise fail(i, f"a name must be a string, got {type(v).__name__}")
    if required is not None:
        bad = np.flatnonzero(codes == NONE)
        if len(bad):
            raise fail(int(bad[0]), f"empty {required}")
    return codes


def _times(column: Any, name: str, fail) -> np.ndarray:  # noqa: C901
    if not isinstance(column, list):
        import pyarrow as pa

        column = column.combine_chunks()
        typ = column.type
        if pa.types.is_timestamp(typ) or pa.types.is_integer(typ) or pa.types.is_floating(typ):
            nulls = column.is_null().to_numpy(zero_copy_only=False)
            if pa.types.is_timestamp(typ):
                column = column.cast(pa.timestamp("ns", tz=typ.tz)).cast(pa.int64())
            arr = column.fill_null(0).to_numpy(zero_copy_only=False)
            if pa.types.is_floating(typ):  # seconds
                nulls |= np.isnan(arr)
                arr = np.round(np.nan_to_num(arr) * 1e9)
            return np.where(nulls, MISSING, arr).astype(np.int64)
        column = column.to_pylist()
    kinds = [_time_kind(v) for v in column]
    present = {k for k in kinds if k is not None}
    if "bad" in present:
        i = kinds.index("bad")
        raise fail(i, f"{name} must be a number or an ISO-8601 string, got {column[i]!r}")
    if "iso" in present and len(present) > 1:
        i = next(i for i, k in enumerate(kinds) if k not in (None, kinds[_first(kinds)]))
        raise fail(i, f"{name} mixes ISO-8601 strings and numbers")
    out = np.full(len(column), MISSING, dtype=np.int64)
    unit = "iso" if "iso" in present else "seconds" if "float" in present else "ns"
    for i, (v, k) in enumerate(zip(column, kinds, strict=True)):
        if k is None:
            continue
        try:
            if unit == "iso":
                out[i] = iso_to_ns(v)
            elif unit == "ns":
                out[i] = int(v)
            else:
                out[i] = seconds_to_ns(repr(v) if isinstance(v, float) else str(v))
        except (ValueError, OverflowError) as e:
            raise fail(i, f"{name}: {e}") from None
    return out


def _first(kinds: list) -> int:
    return next(i for i, k in enumerate(kinds) if k is not None)


def _time_kind(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "bad"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return None if v != v else "float"  # NaN is missing
    if isinstance(v, str):
        v = v.strip()
        if not v:
            return None
        if _INT.fullmatch(v):
            return "int"
        if _NUMBER.fullmatch(v):
            return "float"
        return "iso"
    return "bad"


def _integers(column: Any, name: str, fail) -> np.ndarray:
    values = _values(column)
    out = np.full(len(values), -1, dtype=np.int64)
    for i, v in enumerate(values):
        if v is None or v == "":
            continue
        if (
            (isinstance(v, int) and not isinstance(v, bool))
            or (isinstance(v, float) and v.is_integer())
            or (isinstance(v, str) and _INT.fullmatch(v.strip()))
        ):
            x = int(v)
        else:
            raise fail(i, f"{name} must be an integer, got {v!r}")
        if not -(2**63) <= x < 2**63:
            raise fail(i, f"{name} {x} is out of range (an int64 holds at most {2**63 - 1})")
        out[i] = x
    return out


# --- writing -------------------------------------------------------------------------------------


def write_message_table(path: str | Path, table: MessageTable, *, time_format: str = "ns") -> None:
    """Write ``table`` as CSV, JSON lines or Parquet (by suffix; ``.gz`` compresses CSV and
    JSON lines) with times as int ns, ISO-8601 strings (``iso``) or float seconds
    (``seconds``); missing times are empty cells or nulls."""
    if time_format not in TIME_FORMATS:
        raise ConfigError(f"time_format must be one of {TIME_FORMATS}, got {time_format!r}")
    fmt = table_format(path, head=b"")
    cols = _named_columns(table)
    if fmt == "parquet":
        _write_parquet(path, cols, table, time_format)
        return
    times = {k: _format_times(getattr(table, a), time_format, fmt) for k, a in _TIME_ATTRS}
    rows = zip(*(times[c] if c in times else cols[c] for c in COLUMNS), strict=True)
    if fmt == "jsonl":
        data = b"".join(orjson.dumps(dict(zip(COLUMNS, r, strict=True))) + b"\n" for r in rows)
    else:
        buf = io.StringIO()
        w = csv.writer(buf)  # lines end in CRLF (RFC 4180), so that a name with a CR is quoted
        w.writerow(COLUMNS)
        w.writerows(["" if v is None else v for v in r] for r in rows)
        data = buf.getvalue().encode()
    write_bytes(path, data)


_TIME_ATTRS = (("send_time", "send"), ("receive_time", "recv"))


def _named_columns(table: MessageTable) -> dict[str, list]:
    names = np.array([*table.strings.values, None], dtype=object)  # code -1 is the last slot
    cols: dict[str, list] = {}
    for column, attr in (
        ("sender", "src"),
        ("sender_endpoint", "src_endpoint"),
        ("receiver", "dst"),
        ("receiver_endpoint", "dst_endpoint"),
        ("sender_host", "src_host"),
        ("receiver_host", "dst_host"),
    ):
        cols[column] = names[getattr(table, attr)].tolist()
    for column in ("size", "flow"):
        v = getattr(table, column)
        cols[column] = [None if x < 0 else x for x in v.tolist()]
    return cols


def _format_times(ns: np.ndarray, time_format: str, fmt: str) -> list:
    out: list = []
    for t in ns.tolist():
        if t == MISSING:
            out.append(None)
        elif time_format == "ns":
            out.append(t)
        elif time_format == "iso":
            out.append(ns_to_iso(t))
        elif fmt == "csv":
            sign = "-" if t < 0 else ""
            out.append(f"{sign}{abs(t) // 1_000_000_000}.{abs(t) % 1_000_000_000:09d}")
        else:
            out.append(t / 1e9)
    return out


def ns_to_iso(t: int) -> str:
    """ISO-8601 UTC with nine fractional digits."""
    seconds, frac = divmod(t, 1_000_000_000)
    day = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{day}.{frac:09d}Z"


def _write_parquet(path: str | Path, cols: dict[str, list], table: MessageTable, tf: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays: dict[str, Any] = {}
    for c in COLUMNS:
        attr = dict(_TIME_ATTRS).get(c)
        if attr is None:
            typ = pa.int64() if c in ("size", "flow") else pa.string()
            arrays[c] = pa.array(cols[c], type=typ)
            continue
        ns = getattr(table, attr)
        mask = ns == MISSING
        if tf == "seconds":
            arrays[c] = pa.array(ns / 1e9, type=pa.float64(), mask=mask)
        else:
            typ = pa.timestamp("ns", tz="UTC") if tf == "iso" else pa.int64()
            arrays[c] = pa.array(ns, type=pa.int64(), mask=mask).cast(typ)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(arrays), p)

"""systemd journal exports: ``journalctl -o export`` and ``journalctl -o json``, decoded into
entries (field name → values) for :mod:`tacit.formats.syslog` to read as syslog records.

The Journal Export Format (systemd.io/JOURNAL_EXPORT_FORMATS) serializes one entry as fields
followed by an empty line. A field is ``NAME=value`` on one line, or, when the value is binary
or holds a newline, ``NAME`` on its own line followed by the value's size as a 64-bit
little-endian integer, the value, and a newline. The Journal JSON Format (same document) writes
one entry per line as a JSON object: a value is a string, an array of byte values when it is
not printable text, ``null`` when journalctl left it out (larger than 4096 bytes without
``--all``), and an array of those when the field has several values. A field may repeat in
either format, so every field decodes to a list of values; an omitted value is ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import orjson

from tacit.errors import InputError

Entry = dict[str, list[bytes | None]]
"""One journal entry: each field's values, in the order written."""

EXPORT = "journal-export"
JSON = "journal-json"
_TIMESTAMP = "__REALTIME_TIMESTAMP"
_FIELD_LINE = re.compile(rb"[A-Z0-9_]+=")


def detect_journal(head: bytes) -> str | None:
    """:data:`EXPORT` or :data:`JSON` when the start of a file, ``head``, is a journal export
    (an entry with a ``__REALTIME_TIMESTAMP`` field), otherwise None."""
    first = head.lstrip(b"\r\n").split(b"\n", 1)[0]
    if first.startswith(b"{"):
        try:
            doc = orjson.loads(first)
        except orjson.JSONDecodeError:
            return None
        return JSON if isinstance(doc, dict) and _TIMESTAMP in doc else None
    has_timestamp = head.startswith(b"__REALTIME_TIMESTAMP=") or b"\n__REALTIME_TIMESTAMP=" in head
    return EXPORT if _FIELD_LINE.match(first) and has_timestamp else None


def export_entries(data: bytes, path: str) -> Iterator[tuple[int, Entry]]:
    """(line where it starts, entry) for every entry of a Journal Export Format stream, lines
    counted as ``\\n`` bytes, binary values included. A binary field cut short is an
    :class:`InputError` naming its line: what follows it cannot be found."""
    pos, line, start = 0, 1, 1
    entry: Entry = {}
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            end = len(data)
        text = data[pos:end]
        pos, line = end + 1, line + 1
        if not text:
            if entry:
                yield start, entry
            entry, start = {}, line
            continue
        name, eq, value = text.partition(b"=")
        if not eq:
            value_at = pos + 8
            after = value_at + int.from_bytes(data[pos:value_at], "little")
            if after > len(data) or data[after : after + 1] not in (b"\n", b""):
                raise InputError(
                    f"binary field {name.decode('utf-8', 'backslashreplace')!r}: its size "
                    "runs past the end of the file or the value is not followed by a newline",
                    path=path,
                    record=f"line {line - 1}",
                )
            value = data[value_at:after]
            line += data.count(b"\n", pos, after) + 1
            pos = after + 1
        entry.setdefault(name.decode("utf-8", "backslashreplace"), []).append(value)
    if entry:
        yield start, entry


def json_entry(text: str) -> Entry:
    """The entry on one line of ``journalctl -o json``; a ValueError saying why it is not one."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"malformed JSON ({e.msg})") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return {str(k): _json_values(v) for k, v in doc.items()}


def _json_values(value: object) -> list[bytes | None]:
    if isinstance(value, list) and not all(isinstance(b, int) for b in value):
        return [v for item in value for v in _json_values(item)]
    return [_json_value(value)]


def _json_value(value: object) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int | float):
        return str(value).encode()
    if isinstance(value, list):
        try:
            return bytes(value)
        except ValueError:
            raise ValueError("a binary value with a number outside 0..255") from None
    raise ValueError(f"a field value that is a JSON {type(value).__name__}")

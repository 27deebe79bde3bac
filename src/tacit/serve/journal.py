"""The journal of acknowledged requests: files beside the database that a request is appended
to, and synced, before its sender is told it was accepted; the store moves them into its
``ingest`` table a round of finished traces at a time (:meth:`.store.Store.write_finished`).

Why not commit each request to DuckDB at once: DuckDB's cost of a statement is much the same
whatever it does, and far above that of appending the request to a file and ``fdatasync``.
Moving a round's requests is one statement.

The journal is a series of segments, ``<database>.journal.<n>``; the one being written is the
highest. A record is a header (:data:`_HEADER`: magic, first span's sequence number, span
count, time received, encoding, lengths), the JSON of the state values that go with the
request (a source's progress), the body, and a CRC-32 of all of those. A record cut short or
damaged can only be the last one written before a crash, whose sync had not returned, so it
was never acknowledged: :func:`read_segment` leaves it out and counts it.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import orjson

_MAGIC = b"TJR1"
_HEADER = struct.Struct(">4sqiqBII")
_CRC = struct.Struct(">I")
_ENCODINGS = ("protobuf", "json")


@dataclass(frozen=True)
class Request:
    """One acknowledged request, as the ``ingest`` table holds it, with its state values."""

    first_seq: int
    spans: int
    received_ns: int
    encoding: str
    body: bytes
    state: dict[str, int] = field(default_factory=dict)

    def record(self) -> bytes:
        """The request as a journal record."""
        state = orjson.dumps(self.state) if self.state else b""
        head = _HEADER.pack(
            _MAGIC,
            self.first_seq,
            self.spans,
            self.received_ns,
            _ENCODINGS.index(self.encoding),
            len(state),
            len(self.body),
        )
        crc = zlib.crc32(self.body, zlib.crc32(state, zlib.crc32(head)))
        return b"".join((head, state, self.body, _CRC.pack(crc)))


def read_segment(path: Path) -> tuple[list[Request], int]:
    """The whole records of a segment, in order, and the bytes after them that are not one
    (a record cut short by a crash: 0 when there is none)."""
    data = path.read_bytes()
    out: list[Request] = []
    at = 0
    while at + _HEADER.size <= len(data):
        magic, first, spans, received, enc, state_len, body_len = _HEADER.unpack_from(data, at)
        end = at + _HEADER.size + state_len + body_len
        if magic != _MAGIC or enc >= len(_ENCODINGS) or end + _CRC.size > len(data):
            break
        (crc,) = _CRC.unpack_from(data, end)
        if zlib.crc32(data[at:end]) != crc:
            break
        state_at = at + _HEADER.size
        state = data[state_at : state_at + state_len]
        body = data[state_at + state_len : end]
        state_values = orjson.loads(state) if state else {}
        out.append(Request(first, spans, received, _ENCODINGS[enc], body, state_values))
        at = end + _CRC.size
    return out, len(data) - at


class Journal:
    """The segments of the database at ``database``: appends go to a new one, after those a
    previous run left."""

    def __init__(self, database: Path) -> None:
        self._prefix = f"{database.name}.journal."
        self._dir = database.parent
        self._lock = threading.Lock()
        held = self.segments()
        self._n = held[-1][0] + 1 if held else 0
        self._fd, self._size = self._open(self._n), 0

    def segments(self) -> list[tuple[int, Path]]:
        """(number, path) of every segment on disk, oldest first."""
        found = []
        for p in self._dir.glob(f"{self._prefix}*"):
            suffix = p.name[len(self._prefix) :]
            if suffix.isdigit():
                found.append((int(suffix), p))
        return sorted(found)

    def append(self, request: Request, sync: bool = True) -> None:
        """Write ``request`` and, with ``sync``, wait until it is on disk. A write or sync
        that fails (a full disk) takes the segment back to its length before, so that the
        records written after are not hidden behind a broken one."""
        record = memoryview(request.record())
        with self._lock:
            try:
                written = 0
                while written < len(record):
                    written += os.write(self._fd, record[written:])
                if sync:
                    os.fdatasync(self._fd)
            except BaseException:
                os.ftruncate(self._fd, self._size)
                raise
            self._size += len(record)

    def sealed(self) -> list[Path]:
        """Close the segment being written when it holds anything and start the next; the
        paths of the segments no longer written, oldest first."""
        with self._lock:
            if self._size:
                os.close(self._fd)
                self._n += 1
                self._fd, self._size = self._open(self._n), 0
            return [p for n, p in self.segments() if n < self._n]

    def close(self) -> None:
        """Close the segment being written, and remove it when it is empty. An append after
        this fails (a bad descriptor), never writing to a file that took its number."""
        with self._lock:
            os.close(self._fd)
            self._fd = -1
            if not self._size:
                self._path(self._n).unlink(missing_ok=True)

    def _path(self, n: int) -> Path:
        return self._dir / f"{self._prefix}{n}"

    def _open(self, n: int) -> int:
        """A new segment's file descriptor, once its name is on disk."""
        fd = os.open(self._path(n), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        folder = os.open(self._dir, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
        return fd

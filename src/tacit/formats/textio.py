"""Opening inputs: gzip transparently, directories expanded, errors named by file.

Every reader goes through these helpers so that a truncated gzip stream or malformed JSON
becomes one :class:`~tacit.errors.InputError` naming the file (and, for JSON, line and column).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import stat
import zlib
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, cast

import orjson

from tacit.errors import InputError
from tacit.outputs import write_bytes

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
"""The byte-order mark some editors and Windows tools put before UTF-8 text: every reader
skips it (no capture or protobuf message starts with these bytes)."""


HEAD_BYTES = 1 << 20
"""How much of a file :func:`read_head` reads: enough for any first line a detector looks at."""
INFLATE_RATIO = 50
"""How many times its own size a gzip input may inflate to (beyond :data:`INFLATE_FLOOR`),
unless ``TACIT_MAX_INFLATE_RATIO`` says otherwise: about twice what real inputs inflate
(Jaeger exports, captures, syslogs). Deflate can reach about 1,000 times, so that without a
bound a file of megabytes of zeros fills gigabytes of memory before any reader can say it is
no input of its kind."""
INFLATE_FLOOR = 64 << 20
"""What any gzip input may inflate to, whatever its ratio."""
RATIO_VARIABLE = "TACIT_MAX_INFLATE_RATIO"


def inflate_limit(compressed: int) -> int:
    """The most bytes a gzip input of ``compressed`` bytes may inflate to."""
    text = os.environ.get(RATIO_VARIABLE, "")
    try:
        ratio = float(text) if text else INFLATE_RATIO
    except ValueError:
        raise InputError(f"{RATIO_VARIABLE}={text!r} is not a number") from None
    return max(INFLATE_FLOOR, int(ratio * compressed))


class _Bounded(io.RawIOBase):
    """The inflated bytes of a gzip stream, refused past :func:`inflate_limit`."""

    def __init__(self, raw: BinaryIO, compressed: int, path: Path) -> None:
        self.raw, self.inner = raw, gzip.GzipFile(fileobj=raw)
        self.limit, self.path, self.total = inflate_limit(compressed), path, 0
        self.compressed = compressed

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        """Closes the gzip stream and the file under it, as closing a plain input would."""
        if not self.closed:
            self.inner.close()
            self.raw.close()
        super().close()

    def readinto(self, buffer: Any) -> int:
        n = self.inner.readinto(buffer)
        self.total += n
        if self.total > self.limit:
            raise InputError(
                f"inflates beyond {self.limit:,} bytes from {self.compressed:,} compressed "
                f"(a decompression bomb?); {RATIO_VARIABLE} raises the bound, "
                f"{INFLATE_RATIO} times by default",
                path=str(self.path),
            )
        return n


def open_input(f: BinaryIO, path: Path) -> BinaryIO:
    """``f``, an input opened at its start, as its content: inflated within bounds when it is
    gzip (by magic, not by name). Closing what it returns closes ``f``."""
    gzipped = f.read(2) == GZIP_MAGIC
    f.seek(0)
    if not gzipped:
        return f
    size = os.fstat(f.fileno()).st_size
    return cast(BinaryIO, io.BufferedReader(_Bounded(f, size, path)))


_BLANK = b" \t\r\n\f\v\0"


class _Watched(io.RawIOBase):
    """The bytes of a text input, refused once :data:`HEAD_BYTES` of them have passed with
    nothing but whitespace and zero bytes: that is no start of any text format tacit reads, and
    a small gzip file can hold gigabytes of it (refused here from its first MiB, not once it
    has inflated to its bound)."""

    def __init__(self, inner: BinaryIO, path: Path) -> None:
        self.inner = cast(io.BufferedIOBase, inner)
        self.path, self.blank = path, 0  # blank bytes so far; -1 once content has come

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            self.inner.close()
        super().close()

    def readinto(self, buffer: Any) -> int:
        n = self.inner.readinto(buffer)
        if self.blank >= 0 and n:
            if bytes(memoryview(buffer)[:n]).strip(_BLANK):
                self.blank = -1
            else:
                self.blank += n
                if self.blank >= HEAD_BYTES:
                    raise InputError(
                        "nothing but whitespace and zero bytes in its first "
                        f"{HEAD_BYTES:,} bytes: no text input",
                        path=str(self.path),
                    )
        return n


def open_text(f: BinaryIO, path: Path) -> BinaryIO:
    """``f`` (an input opened at its start) as :func:`open_input` gives it, refused once its
    first MiB has passed blank (:class:`_Watched`); for text formats."""
    return cast(BinaryIO, io.BufferedReader(_Watched(open_input(f, path), path)))


def read_bytes(path: str | Path) -> bytes:
    """The content of ``path``, decompressed when it is gzip (detected by magic, not by name),
    without a UTF-8 byte-order mark."""
    return _read(path, None)


def read_text(path: str | Path) -> str:
    """The content of ``path`` as :func:`read_bytes` gives it, as UTF-8 text, refused from its
    first MiB if that is blank (:func:`open_text`)."""
    p = Path(path)
    with _input_errors(p), p.open("rb") as f:
        data = _without_bom(open_text(f, p), None)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start})", path=str(path)) from None


def read_head(path: str | Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of ``path`` (decompressed when it is gzip): what a format
    detector needs, without reading a large file whole."""
    return _read(path, size)


def _read(path: str | Path, size: int | None) -> bytes:
    p = Path(path)
    with _input_errors(p), p.open("rb") as f:
        return _without_bom(open_input(f, p), size)


def _without_bom(f: BinaryIO, size: int | None) -> bytes:
    """The content of ``f`` (the first ``size`` bytes of it) after a UTF-8 byte-order mark."""
    return _skip_bom(f).read() if size is None else _skip_bom(f).read(size)


def _skip_bom(f: BinaryIO) -> BinaryIO:
    """``f`` (at its start; buffered, as files opened for reading are) past a UTF-8
    byte-order mark, if it has one."""
    if cast(io.BufferedReader, f).peek(len(UTF8_BOM))[: len(UTF8_BOM)] == UTF8_BOM:
        f.read(len(UTF8_BOM))
    return f


@contextmanager
def _input_errors(p: Path) -> Iterator[None]:
    """Errors opening or reading ``p`` (gzip included) as :class:`InputError` naming it."""
    try:
        yield
    except FileNotFoundError:
        raise InputError("no such file", path=str(p)) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a file", path=str(p)) from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise InputError(f"corrupt or truncated gzip stream ({e})", path=str(p)) from None
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", path=str(p)) from None


def csv_rows(path: str | Path) -> Iterator[tuple[int, list[str]]]:
    """(line, row) for every row of the CSV file ``path``, ``line`` being where the row ends
    (a quoted field may hold newlines), read incrementally (gzip or not), so that memory does
    not grow with the file. A row the csv module cannot parse (a lone carriage return in an
    unquoted field, a field past its size limit) is an :class:`InputError` naming its line;
    text that is not UTF-8 one naming the file."""
    p = Path(path)
    with _open_lines(p) as lines, _input_errors(p):
        reader = csv.reader(io.TextIOWrapper(lines, encoding="utf-8", newline=""))
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                raise InputError(
                    f"malformed CSV: {e}", path=str(p), record=f"line {reader.line_num}"
                ) from None
            except UnicodeDecodeError as e:  # decoded a block ahead: no line to name
                raise InputError(f"not UTF-8 text ({e.reason})", path=str(p)) from None
            yield reader.line_num, row


def parse_json(text: str | bytes) -> Any:
    """Parse one JSON document (orjson: several times faster than the standard library)."""
    return orjson.loads(text)


def load_json(path: str | Path, text: str | None = None) -> Any:
    """The JSON document in ``path`` (``text``: its content, when already read)."""
    data = read_bytes(path) if text is None else text
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise InputError(
            f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}", path=str(path)
        ) from None


def iter_json_lines(path: str | Path) -> Generator[tuple[int, Any], None, None]:
    """(line number, object) for every non-blank line of a JSON-lines file, read line by line
    (gzip or not), so that memory does not grow with the file.

    Lines end at ``\n`` (JSON Lines), not at the other characters :meth:`str.splitlines`
    breaks at: a JSON string may hold U+2028 or U+0085 unescaped.
    """
    p = Path(path)
    with _open_lines(p) as lines, _input_errors(p):
        for lineno, data in _content_lines(lines):
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(
                    f"not UTF-8 text (byte {e.start} of the line)",
                    path=str(p),
                    record=f"line {lineno}",
                ) from None
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise InputError(
                    f"malformed JSON: {e.msg}", path=str(p), record=f"line {lineno}"
                ) from None
            yield lineno, obj


_BLOCK = 1 << 20
_CONTENT_LINE = re.compile(rb"^[ \t\r\f\v]*[^\s][^\n]*", re.MULTILINE)
"""A line with a byte other than ASCII whitespace, from its start to its ``\n``."""


def _content_lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of every line of ``stream`` that is not blank, read a block at a
    time: blank lines are passed over by the regular expression, not one by one in Python,
    since a small gzip file can hold hundreds of millions of them."""
    lineno, pending = 1, list[bytes]()
    while block := stream.read(_BLOCK):
        cut = block.rfind(b"\n") + 1
        if not cut:  # inside a line longer than a block
            pending.append(block)
            continue
        body = b"".join((*pending, block[:cut])) if pending else block[:cut]
        pending = [block[cut:]] if cut < len(block) else []
        at = 0
        for m in _CONTENT_LINE.finditer(body):
            lineno += body.count(b"\n", at, m.start())
            at = m.start()
            yield lineno, m.group()
        lineno += body.count(b"\n", at)
    last = b"".join(pending)
    if last.strip():
        yield lineno, last


@contextmanager
def _open_lines(p: Path) -> Iterator[BinaryIO]:
    """``p`` opened for reading line by line, decompressed when it is gzip, past a UTF-8
    byte-order mark, refused from its first MiB if that is blank (:func:`open_text`)."""
    with _input_errors(p):
        raw = p.open("rb")
    with raw, _input_errors(p):
        yield _skip_bom(open_text(raw, p))


def expand_inputs(paths: list[str | Path], suffixes: tuple[str, ...]) -> list[Path]:
    """Files named directly, plus the files with one of ``suffixes`` inside named directories.
    One file reached twice (named twice, or through a link) is refused (:func:`refuse_repeated`)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(
                f for f in p.iterdir() if f.is_file() and any(f.name.endswith(s) for s in suffixes)
            )
            if not found:
                raise InputError(f"directory holds no {'/'.join(suffixes)} files", path=str(p))
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise InputError("no such file or directory", path=str(p))
    refuse_repeated(out)
    return out


def refuse_repeated(files: list[Path]) -> None:
    """Raise naming the second of two ``files`` that are one regular file (by any name): its
    records would count twice."""
    seen: dict[tuple[int, int], Path] = {}
    for f in files:
        st = f.stat()
        first = seen.setdefault((st.st_dev, st.st_ino), f)
        if first is not f and stat.S_ISREG(st.st_mode):
            raise InputError(
                f"the same file as {first}: its records would count twice", path=str(f)
            )


def dump_json(obj: Any) -> bytes:
    """``obj`` as compact JSON, as every writer writes it."""
    return json.dumps(obj, separators=(",", ":")).encode()


def write_json(path: str | Path, obj: Any) -> None:
    write_bytes(path, dump_json(obj))

"""Request bodies as senders compress them (HTTP ``Content-Encoding``): gzip, deflate, zstd and
snappy, the encodings the Collector's ``otlphttp`` exporter and the SDKs send.

Each is inflated within a bound given by the caller, and refused beyond it before more is
built: a small body can inflate a thousandfold. zstd is read once to the bound, then whole
once it is known to fit (a reader stops quietly at a cut frame; the whole read says so).
snappy's lengths stand in its headers (a block's varint, a frame's chunk headers), so they are
checked before anything is inflated. ``snappy`` is the block format, or the framed one when
the body starts with the framing's stream identifier, as the Collector reads it (it sent the
framed format under that name); ``x-snappy-framed`` is the framed format. Any other encoding
is :class:`UnsupportedEncoding` (415, naming those taken)."""

from __future__ import annotations

import io
import zlib

from tacit.errors import InputError

ENCODINGS = ("gzip", "deflate", "zstd", "snappy", "x-snappy-framed")
"""The content encodings taken, beside ``identity``."""
SNAPPY_STREAM = b"\xff\x06\x00\x00sNaPpY"
"""The stream identifier chunk every framed snappy stream starts with."""
_SNAPPY_CHUNK = 65536
"""The most one chunk of the framed format inflates to."""


class UnsupportedEncoding(InputError):
    """A content encoding that is not taken."""


def decode_body(body: bytes, encoding: str | None, limit: int) -> bytes:
    """``body`` inflated as ``encoding`` says (None or ``identity``: as it is); one that
    inflates beyond ``limit`` bytes, is cut short or has bytes after its end is an
    :class:`~tacit.errors.InputError` naming the encoding."""
    name = (encoding or "identity").strip().lower()
    if name == "identity":
        return body
    if name == "gzip":
        return _zlib(body, "gzip", 31, limit)
    if name == "deflate":  # zlib framing as RFC 9110 says; raw deflate as some clients send it
        return _zlib(body, "deflate", 15 if _zlib_header(body) else -15, limit)
    if name == "zstd":
        return _zstd(body, limit)
    if name == "snappy":
        return _framed(body, limit) if body.startswith(SNAPPY_STREAM) else _block(body, limit)
    if name == "x-snappy-framed":
        return _framed(body, limit)
    raise UnsupportedEncoding(
        f"content encoding {encoding!r} is not taken: {', '.join(ENCODINGS)} or identity"
    )


def _zlib(body: bytes, name: str, wbits: int, limit: int) -> bytes:
    inflate = zlib.decompressobj(wbits=wbits)
    try:
        out = inflate.decompress(body, limit + 1)
    except zlib.error as e:
        raise InputError(f"{name} body does not decompress: {e}") from None
    _check(name, len(out), limit, inflate.eof, inflate.unused_data)
    return out


def _zlib_header(body: bytes) -> bool:
    """Whether ``body`` starts with a zlib header (RFC 1950: deflate, a valid check)."""
    return len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0


def _zstd(body: bytes, limit: int) -> bytes:
    import zstandard

    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body))
        if len(reader.read(limit + 1)) > limit:
            raise InputError(f"zstd body inflates beyond {limit:,} bytes")
        whole = zstandard.ZstdDecompressor().decompressobj()
        out = whole.decompress(body)
    except zstandard.ZstdError as e:
        raise InputError(f"zstd body does not decompress: {e}") from None
    _check("zstd", len(out), limit, whole.eof, whole.unused_data)
    return out


def _check(name: str, size: int, limit: int, ended: bool, after: bytes) -> None:
    if size > limit:  # a small body that inflates without end is refused
        raise InputError(f"{name} body inflates beyond {limit:,} bytes")
    if not ended:
        raise InputError(f"{name} body is truncated")
    if after:
        raise InputError(f"{name} body has {len(after)} bytes after its end")


def _block(body: bytes, limit: int) -> bytes:
    import cramjam

    size = _varint(body)
    if size is None:
        raise InputError("snappy body does not start with its length")
    if size > limit:
        raise InputError(f"snappy body inflates beyond {limit:,} bytes")
    try:
        return bytes(cramjam.snappy.decompress_raw(body))
    except cramjam.DecompressionError as e:
        raise InputError(f"snappy body does not decompress: {e}") from None


def _framed(body: bytes, limit: int) -> bytes:
    """A framed snappy stream, its chunks' sizes summed from their headers first."""
    import cramjam

    if not body:
        return b""
    if not body.startswith(SNAPPY_STREAM):
        raise InputError("framed snappy body does not start with the stream identifier")
    at, size = 0, 0
    while at < len(body):
        kind, length = body[at], int.from_bytes(body[at + 1 : at + 4], "little")
        if at + 4 + length > len(body):
            raise InputError("framed snappy body is truncated")
        if kind == 0x00:  # compressed: a checksum, then a block
            inflates = _varint(body[at + 8 : at + 4 + length])
            if inflates is None or inflates > _SNAPPY_CHUNK:
                raise InputError("framed snappy body has a chunk that is no block of 64 KiB")
            size += inflates
        elif kind == 0x01:  # uncompressed: a checksum, then the data
            size += length - 4
        if size > limit:
            raise InputError(f"snappy body inflates beyond {limit:,} bytes")
        at += 4 + length
    try:
        return bytes(cramjam.snappy.decompress(body))
    except cramjam.DecompressionError as e:
        raise InputError(f"snappy body does not decompress: {e}") from None


def _varint(data: bytes) -> int | None:
    """The unsigned varint ``data`` starts with (a snappy block's length), None if none."""
    value = 0
    for i, byte in enumerate(data[:5]):
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value
    return None

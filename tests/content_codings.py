"""Request bodies compressed as senders compress them, by the reference libraries (zlib,
libzstd, snappy's Rust port), for the receiver's tests and its fuzz cases."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable

import cramjam
import zstandard

COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "zstd": zstandard.ZstdCompressor().compress,
    "snappy": lambda d: bytes(cramjam.snappy.compress_raw(d)),
    "x-snappy-framed": lambda d: bytes(cramjam.snappy.compress(d)),
}
"""Each content encoding the receiver takes, by its name in ``Content-Encoding``."""

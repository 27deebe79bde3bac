"""Protobuf's wire form written by hand, for bodies the message classes would not make (empty
containers by the million, spans of nothing but ids, damaged lengths)."""

from __future__ import annotations


def varint(n: int) -> bytes:
    """``n`` (not negative) as a base-128 varint."""
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def delimited(number: int, payload: bytes) -> bytes:
    """Field ``number`` holding ``payload``, length-delimited (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload

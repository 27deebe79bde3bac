"""HPACK field block decoding (RFC 7541), compiled: the header blocks of HTTP/2 (:mod:`.http2`).

One :class:`HpackDecoder` per direction of a connection decodes its field blocks in order, each
into a list of (name, value) pairs, bytes or text. The work is one numba loop per block over the
representations of §6: indexed fields (§6.1), literals with incremental indexing (§6.2.1),
without indexing (§6.2.2) and never indexed (§6.2.3), and dynamic table size updates (§6.3);
integers (§5.1) and string literals (§5.2), Huffman-coded ones with the static code of
Appendix B; indices into the static table of Appendix A followed by the dynamic table (§2.3.3),
whose size is accounted as §4.1 says and whose entries are evicted as §4.3 and §4.4 say.

The code and the static table are taken from the hpack package (``hpack.huffman_constants``,
``hpack.table``): they are the RFC's appendices as data.

Buffers the loop cannot size in advance (decoded bytes, table storage) are grown by the Python
wrapper: the loop stops before the representation that does not fit, having changed nothing for
it, and the wrapper resumes it there with more room.
"""

from __future__ import annotations

from typing import Any, Literal, overload

import numpy as np
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hpack.table import HeaderTable
from numba import njit

from tacit.errors import InputError

ENTRY_OVERHEAD = 32
"""What an entry adds to the table size beyond its name and value (RFC 7541 §4.1)."""
DEFAULT_TABLE_SIZE = 4096
"""SETTINGS_HEADER_TABLE_SIZE until a SETTINGS frame says otherwise (RFC 9113 §6.5.2)."""


class HpackError(InputError):
    """A field block that does not decode: RFC 7541 calls it a decoding error (§2.3.3, §4.2,
    §5.1, §5.2), after which the decoder's dynamic table is lost."""


def _huffman_machine() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The code of Appendix B as a state machine read four bits at a time: states are the
    internal nodes of the code tree (0 the root); for (state, nibble) at ``16 * state + nibble``
    the next state and the symbol completed (-1 none, -2 EOS, a decoding error by §5.2), and
    per state whether a string may end there: its path is all ones (the most significant bits
    of EOS) and at most 7 bits long (§5.2 padding)."""
    child = [[-1, -1]]  # internal nodes; a leaf is stored as -(symbol + 1) - 1
    depth, ones = [0], [True]
    for sym, (code, length) in enumerate(zip(REQUEST_CODES, REQUEST_CODES_LENGTH, strict=True)):
        node = 0
        for k in range(length - 1, -1, -1):
            bit = (code >> k) & 1
            if k == 0:
                child[node][bit] = -sym - 2
            else:
                if child[node][bit] == -1:
                    child[node][bit] = len(child)
                    child.append([-1, -1])
                    depth.append(depth[node] + 1)
                    ones.append(ones[node] and bit == 1)
                node = child[node][bit]
    nxt = np.zeros(16 * len(child), np.int64)
    emit = np.full(16 * len(child), -1, np.int64)
    for state in range(len(child)):
        for nibble in range(16):
            node, sym = state, -1
            for k in range(3, -1, -1):
                c = child[node][(nibble >> k) & 1]
                if c >= 0:
                    node = c
                    continue
                sym = -c - 2
                node = 0
                if sym == len(REQUEST_CODES) - 1:  # EOS
                    sym = -2
                    break
            nxt[16 * state + nibble], emit[16 * state + nibble] = node, sym
    accept = np.array([o and d <= 7 for o, d in zip(ones, depth, strict=True)])
    return nxt, emit, accept


def _static_table() -> tuple[np.ndarray, np.ndarray]:
    """The static table (Appendix A) as bytes and (start, name length, value length) per entry."""
    rows, at = [], 0
    for name, value in HeaderTable.STATIC_TABLE:
        rows.append((at, len(name), len(value)))
        at += len(name) + len(value)
    data = b"".join(name + value for name, value in HeaderTable.STATIC_TABLE)
    return np.frombuffer(data, np.uint8).copy(), np.array(rows, np.int64).ravel()


_HUFF_NEXT, _HUFF_EMIT, _HUFF_ACCEPT = _huffman_machine()
_STATIC_BYTES, _STATIC = _static_table()
_STATIC_N = len(_STATIC) // 3
_STATIC_LEN = len(_STATIC_BYTES)  # the table buffer holds the static bytes first
_INT_BYTES = 5  # continuation bytes an integer may take (§5.1 lets a decoder bound them)

# meta: scalars, then the fields decoded as offsets into the output (name, value, name, ...)
_MAX, _SIZE, _FIRST, _COUNT, _LO, _HI, LIMIT, _LIST_MAX = 0, 1, 2, 3, 4, 5, 6, 7
_POS, _N, _USED, _LISTED, _NEED, CHANGED = 8, 9, 10, 11, 12, 13
FIELDS = 14
"""Where the decoded fields' offsets start in the ``meta`` array of :func:`decode_block`."""

NEED_OUT = -1
NEED_TABLE = -2
_REASONS = {
    -3: "integer cut short (RFC 7541 §5.1)",
    -4: "integer longer than 5 continuation bytes (RFC 7541 §5.1)",
    -5: "string literal cut short (RFC 7541 §5.2)",
    -6: "index not in the static or dynamic table (RFC 7541 §2.3.3)",
    -7: "Huffman code with EOS or bad padding (RFC 7541 §5.2)",
    -8: "dynamic table size update after a field (RFC 7541 §4.2)",
    -9: "dynamic table size update above the SETTINGS limit (RFC 7541 §6.3)",
    -10: "dynamic table larger than the SETTINGS limit (RFC 7541 §4.2)",
    -11: "field section larger than the decoder accepts",
}


@njit(cache=True, inline="always")
def _integer(block, pos, bits):  # pragma: no cover - compiled
    """The integer with a ``bits``-bit prefix at ``pos`` (§5.1) and the offset after it, or
    an error code of :data:`_REASONS` when it is cut short or too long."""
    end = len(block)
    mask = (1 << bits) - 1
    value = np.int64(block[pos] & mask)
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    for _ in range(_INT_BYTES):
        if pos >= end:
            return 0, -3
        b = np.int64(block[pos])
        pos += 1
        value += (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    return 0, -4


@njit(cache=True, inline="always")
def _entry(meta, ents, index):  # pragma: no cover - compiled
    """Where entry ``index`` (1-based, §2.3.3) is in the table buffer: (start, name length,
    value length), start -1 when no such entry exists."""
    if index < 1:
        return -1, 0, 0
    if index <= _STATIC_N:
        k = 3 * (index - 1)
        return _STATIC[k], _STATIC[k + 1], _STATIC[k + 2]
    i = index - _STATIC_N - 1  # 0: the newest dynamic entry
    count = meta[_COUNT]
    if i >= count:
        return -1, 0, 0
    slot = 3 * ((meta[_FIRST] + count - 1 - i) % (len(ents) // 3))
    return ents[slot], ents[slot + 1], ents[slot + 2]


@njit(cache=True, inline="always")
def _string(block, pos, out, at):  # pragma: no cover - compiled  # noqa: C901
    """Decode the string literal at ``pos`` (§5.2) into ``out`` at ``at``: (offset after it,
    offset after the bytes written); the first is an error code of :data:`_REASONS`, or
    ``NEED_OUT`` when ``out`` has no room (nothing written)."""
    huffman = block[pos] & 0x80
    n, pos = _integer(block, pos, 7)
    if pos < 0:
        return pos, at
    end = pos + n
    if end > len(block):
        return -5, at
    room = n * 8 // 5 if huffman else n  # every symbol takes at least 5 bits
    if at + room > len(out):
        return NEED_OUT, at
    if not huffman:
        for i in range(n):
            out[at + i] = block[pos + i]
        return end, at + n
    state = 0
    for i in range(pos, end):
        b = np.int64(block[i])
        for nibble in (b >> 4, b & 0xF):
            t = 16 * state + nibble
            sym = _HUFF_EMIT[t]
            if sym == -2:
                return -7, at
            if sym >= 0:
                out[at] = sym
                at += 1
            state = _HUFF_NEXT[t]
    if not _HUFF_ACCEPT[state]:
        return -7, at
    return end, at


@njit(cache=True, inline="always")
def _evict(meta, ents, room):  # pragma: no cover - compiled
    """Evict the oldest entries until the table size is at most ``room`` (§4.3, §4.4)."""
    cap = len(ents) // 3
    while meta[_SIZE] > room and meta[_COUNT]:
        slot = 3 * meta[_FIRST]
        meta[_SIZE] -= ENTRY_OVERHEAD + ents[slot + 1] + ents[slot + 2]
        meta[_FIRST] = (meta[_FIRST] + 1) % cap
        meta[_COUNT] -= 1
        meta[CHANGED] = 1
    if meta[_COUNT]:
        meta[_LO] = ents[3 * meta[_FIRST]]
    else:
        meta[_LO] = meta[_HI] = _STATIC_LEN


@njit(cache=True, inline="always")
def _insert(meta, ents, table, out, start, nlen, vlen):  # pragma: no cover - compiled
    """Add the field at ``out[start:]`` as the newest entry (§4.4): evict first to make room;
    an entry larger than the table empties it. The buffers are large enough for any table of
    the current maximum size (the wrapper grows them before a size update raises it)."""
    size = ENTRY_OVERHEAD + nlen + vlen
    meta[CHANGED] = 1
    if size > meta[_MAX]:
        _evict(meta, ents, 0)
        return
    _evict(meta, ents, meta[_MAX] - size)
    n = nlen + vlen
    hi = meta[_HI]
    if hi + n > len(table):  # compact: the live bytes move down to just after the static ones
        lo = meta[_LO]
        live = hi - lo
        table[_STATIC_LEN : _STATIC_LEN + live] = table[lo:hi].copy()
        cap = len(ents) // 3
        for k in range(meta[_COUNT]):
            ents[3 * ((meta[_FIRST] + k) % cap)] -= lo - _STATIC_LEN
        meta[_LO] = _STATIC_LEN
        hi = _STATIC_LEN + live
    table[hi : hi + n] = out[start : start + n]
    cap = len(ents) // 3
    slot = 3 * ((meta[_FIRST] + meta[_COUNT]) % cap)
    ents[slot], ents[slot + 1], ents[slot + 2] = hi, nlen, vlen
    if not meta[_COUNT]:
        meta[_LO] = hi
    meta[_COUNT] += 1
    meta[_HI] = hi + n
    meta[_SIZE] += size


@njit(cache=True)
def decode_block(block, meta, ents, table, out):  # pragma: no cover - compiled  # noqa: C901, PLR0912, PLR0915
    """Decode ``block`` into ``out``, the fields' offsets into ``meta`` from ``FIELDS`` (name,
    value, name, ..., end); returns the number of fields, or ``NEED_OUT`` or ``NEED_TABLE``
    (grow, ``meta[_NEED]`` says to what, and call again to resume at ``meta[_POS]``), or an
    error code of :data:`_REASONS`."""
    pos, n, at, listed = meta[_POS], meta[_N], meta[_USED], meta[_LISTED]
    if not pos:
        meta[CHANGED] = 0
    end = len(block)
    while pos < end:
        start = pos
        b = block[pos]
        if b & 0x20 and not b & 0xC0:  # dynamic table size update (§6.3)
            size, pos = _integer(block, pos, 5)
            if pos < 0:
                return pos
            if n:
                return -8
            if size > meta[LIMIT]:
                return -9
            if _STATIC_LEN + size > len(table) or size // ENTRY_OVERHEAD + 1 > len(ents) // 3:
                meta[_POS], meta[_N], meta[_USED], meta[_LISTED] = start, n, at, listed
                meta[_NEED] = size
                return NEED_TABLE
            meta[_MAX] = size
            meta[CHANGED] = 1
            _evict(meta, ents, size)
            continue
        indexed = b & 0x80
        if indexed:  # indexed field (§6.1)
            index, pos = _integer(block, pos, 7)
        elif b & 0x40:  # literal with incremental indexing (§6.2.1)
            index, pos = _integer(block, pos, 6)
        else:  # literal without indexing or never indexed (§6.2.2, §6.2.3)
            index, pos = _integer(block, pos, 4)
        if pos < 0:
            return pos
        name_at = at
        if index or indexed:
            e, nlen, vlen = _entry(meta, ents, index)
            if e < 0:
                return -6
            take = nlen + vlen if indexed else nlen
            if at + take > len(out):
                meta[_POS], meta[_N], meta[_USED], meta[_LISTED] = start, n, at, listed
                meta[_NEED] = at + take
                return NEED_OUT
            out[at : at + take] = table[e : e + take]
            at += take
            value_at = at - vlen if indexed else at
        else:
            if pos >= end:
                return -3
            pos, at = _string(block, pos, out, at)
            value_at = at
        if not indexed and pos >= 0:
            if pos >= end:
                return -3
            pos, at = _string(block, pos, out, at)
        if pos == NEED_OUT:
            meta[_POS], meta[_N], meta[_USED], meta[_LISTED] = start, n, name_at, listed
            meta[_NEED] = name_at + 2 * (end - start) + 8
            return NEED_OUT
        if pos < 0:
            return pos
        listed += ENTRY_OVERHEAD + at - name_at
        if listed > meta[_LIST_MAX]:
            return -11
        meta[FIELDS + 2 * n] = name_at
        meta[FIELDS + 2 * n + 1] = value_at
        n += 1
        if b & 0xC0 == 0x40:
            _insert(meta, ents, table, out, name_at, value_at - name_at, at - value_at)
    if meta[_MAX] > meta[LIMIT]:
        return -10
    meta[FIELDS + 2 * n] = at
    meta[_POS] = meta[_N] = meta[_USED] = meta[_LISTED] = 0  # ready for the next block
    return n


class HpackDecoder:
    """The HPACK decoder of one direction of an HTTP/2 connection (RFC 7541 §2.2: one per
    direction, fed every field block in order).

    ``limit`` is the largest dynamic table size the decoder's endpoint allows
    (SETTINGS_HEADER_TABLE_SIZE, RFC 9113 §6.5.2): a size update above it is an error (§6.3),
    as is a table still larger than it at the end of a block (§4.2: the encoder must shrink the
    table after the limit decreases). ``max_field_section`` bounds a block's decoded size, counted
    as entries are (§4.1). After an error the dynamic table is lost and the decoder is of no
    further use.
    """

    def __init__(self, limit: int = DEFAULT_TABLE_SIZE, max_field_section: int = 1 << 16) -> None:
        if limit < 0 or max_field_section < 0:
            raise ValueError("limit and max_field_section must be at least 0")
        self._meta = np.zeros(FIELDS + 64, np.int64)
        self._meta[_MAX] = DEFAULT_TABLE_SIZE
        self._meta[_LO] = self._meta[_HI] = _STATIC_LEN
        self._meta[LIMIT] = limit
        self._meta[_LIST_MAX] = max_field_section
        self._ents = np.zeros(3 * (DEFAULT_TABLE_SIZE // ENTRY_OVERHEAD + 1), np.int64)
        self._table = np.zeros(_STATIC_LEN + DEFAULT_TABLE_SIZE, np.uint8)
        self._table[:_STATIC_LEN] = _STATIC_BYTES
        self._out = np.zeros(4096, np.uint8)
        self.changed = False
        """Whether the last block changed the dynamic table (an entry added or evicted, or
        its maximum size set): while it does not, blocks decode as they did (§3.2)."""

    def copy(self) -> HpackDecoder:
        """A decoder in the same state, that goes on apart from this one."""
        other = object.__new__(HpackDecoder)
        other._meta, other._ents, other._table, other._out = (a.copy() for a in self.state)
        other.changed = self.changed
        return other

    @property
    def limit(self) -> int:
        return int(self._meta[LIMIT])

    @limit.setter
    def limit(self, value: int) -> None:
        if value < 0:
            raise ValueError("limit must be at least 0")
        self._meta[LIMIT] = value

    @property
    def table_size(self) -> int:
        """The dynamic table's maximum size, as the encoder last set it (§4.2)."""
        return int(self._meta[_MAX])

    @overload
    def decode(self, block: bytes, text: Literal[False] = False) -> list[tuple[bytes, bytes]]: ...
    @overload
    def decode(self, block: bytes, text: Literal[True]) -> list[tuple[str, str]]: ...
    def decode(self, block: bytes, text: bool = False) -> list[tuple[Any, Any]]:
        """The fields of one complete field block, in order; :class:`HpackError` if it does not
        decode. With ``text``, names and values are read as UTF-8 (invalid bytes replaced by
        U+FFFD): a block of ASCII is decoded once and cut, not field by field."""
        self.make_room(len(block))
        data = np.frombuffer(block, np.uint8).copy()  # the type the capture parser passes
        while (n := decode_block(data, self._meta, self._ents, self._table, self._out)) < 0:
            self.resume(n)
        self.changed = self._meta[CHANGED] != 0
        return self.fields(n, text)

    @property
    def state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The arrays :func:`decode_block` takes, for compiled callers that decode blocks
        themselves: they call :meth:`make_room` first and :meth:`resume` on a negative answer."""
        return self._meta, self._ents, self._table, self._out

    def make_room(self, size: int) -> None:
        """Room for the fields of a block of ``size`` bytes (a field takes a byte at least)."""
        if len(self._meta) < FIELDS + 2 * size + 1:
            self._meta = np.concatenate([self._meta, np.zeros(2 * size + 1, np.int64)])

    def resume(self, code: int) -> None:
        """Act on what :func:`decode_block` answered when below 0: grow the buffer it needs (it
        then resumes where it stopped), or raise :class:`HpackError` for a decoding error."""
        meta = self._meta
        if code == NEED_OUT:
            self._out = _grown(self._out, int(meta[_NEED]))
        elif code == NEED_TABLE:
            self._grow_table(int(meta[_NEED]))
        else:
            meta[_POS] = meta[_N] = meta[_USED] = meta[_LISTED] = 0
            raise HpackError(_REASONS[code])

    def fields(self, n: int, text: bool = False) -> list[tuple[Any, Any]]:
        """The ``n`` fields of the block just decoded (see :meth:`decode`)."""
        b = self._meta[FIELDS : FIELDS + 2 * n + 1].tolist()
        raw: Any = self._out[: b[-1]].tobytes()
        if text:
            if not raw.isascii():
                return [
                    (_utf8(raw[b[i] : b[i + 1]]), _utf8(raw[b[i + 1] : b[i + 2]]))
                    for i in range(0, 2 * n, 2)
                ]
            raw = raw.decode("ascii")
        return [(raw[b[i] : b[i + 1]], raw[b[i + 1] : b[i + 2]]) for i in range(0, 2 * n, 2)]

    def _grow_table(self, size: int) -> None:
        """Room for a dynamic table of ``size``: its bytes and its entries, the oldest first."""
        meta, ents = self._meta, self._ents
        cap = len(ents) // 3
        order = (meta[_FIRST] + np.arange(meta[_COUNT])) % cap
        grown = np.zeros(3 * max(size // ENTRY_OVERHEAD + 1, cap), np.int64).reshape(-1, 3)
        grown[: len(order)] = ents.reshape(-1, 3)[order]
        self._ents = grown.ravel()
        meta[_FIRST] = 0
        self._table = _grown(self._table, _STATIC_LEN + size)


def _utf8(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    """``a`` copied into a new array of at least ``size`` elements, at least twice as long."""
    if size <= len(a):
        return a
    b = np.zeros(max(size, 2 * len(a)), a.dtype)
    b[: len(a)] = a
    return b

"""What every column batch of tacit shares: typed numpy columns over one string pool."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import ClassVar, Self

import numpy as np
import numpy.typing as npt

from tacit.errors import InputError

NONE = -1
"""The code of an absent string or row."""


def typed_columns(
    cols: Mapping[str, list],
    dtypes: Mapping[str, npt.DTypeLike],
    record: Sequence[int | str],
    source: str | None,
) -> dict[str, np.ndarray]:
    """A builder's lists as numpy columns of their types. An integer the type cannot hold (a
    time of 2**63 ns, or 1e23 written as an integer) is an :class:`InputError` naming the
    source, the record (``record``: each row's, a number or a line) and the column."""
    out = {}
    for k, v in cols.items():
        try:
            out[k] = np.asarray(v, dtype=dtypes[k])
        except OverflowError:
            info = np.iinfo(dtypes[k])
            row = next(i for i, x in enumerate(v) if not info.min <= x <= info.max)
            raise InputError(
                f"{k} {v[row]} out of range (an {np.dtype(dtypes[k]).name} holds "
                f"{info.min} to {info.max})",
                path=source,
                record=record[row],
            ) from None
    return out


class StringPool:
    """Interns strings to dense int32 codes (code -1 is "absent")."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._codes: dict[str, int] = {}
        self.values: list[str] = []
        for v in values:
            self.code(v)

    def code(self, value: str | None) -> int:
        if value is None:
            return NONE
        c = self._codes.get(value)
        if c is None:
            c = len(self.values)
            self._codes[value] = c
            self.values.append(value)
        return c

    def codes(self, values: list[str]) -> list[int]:
        """The code of each of ``values``, interning those new in their order: ``[pool.code(v)
        for v in values]`` with a dictionary look-up, not a method call, per value (far cheaper),
        for the thousands of strings a receiver codes a second."""
        out = [self._codes.get(v, NONE) for v in values]
        if NONE in out:
            out = [c if c != NONE else self.code(v) for c, v in zip(out, values, strict=True)]
        return out

    def find(self, value: str) -> int:
        """The code of ``value`` or -1 when it was never interned."""
        return self._codes.get(value, NONE)

    def __getitem__(self, code: int) -> str | None:
        return None if code < 0 else self.values[code]

    def names(self, codes: np.ndarray) -> list[str | None]:
        """The string of each of ``codes`` (None for -1): ``[pool[c] for c in codes]``
        without a method call per code, for columns of thousands."""
        values = self.values
        return [values[c] if c >= 0 else None for c in codes.tolist()]

    def objects(self, *columns: np.ndarray) -> list[np.ndarray]:
        """The strings of each of ``columns`` (codes; None for -1) as an array of objects: the
        pool's strings indexed by the codes at once, faster than :meth:`names` where
        the codes are about as many as the pool's strings (the ids of an OTLP request)."""
        table = np.empty(len(self.values) + 1, dtype=object)  # the last, None, is code -1's
        table[:-1] = self.values
        return [table[c] for c in columns]

    def __len__(self) -> int:
        return len(self.values)


class ColumnTable:
    """Base of the column-batch dataclasses (spans, messages, socket events).

    A subclass is a dataclass with a ``strings`` pool and one field per entry of ``COLUMNS``
    (name → numpy dtype).
    """

    COLUMNS: ClassVar[Mapping[str, npt.DTypeLike]]
    strings: StringPool

    def __post_init__(self) -> None:
        n = len(getattr(self, next(iter(self.COLUMNS))))
        for name, dtype in self.COLUMNS.items():
            col: np.ndarray = np.asarray(getattr(self, name), dtype=dtype)
            if len(col) != n:
                raise ValueError(f"column {name} has {len(col)} rows, expected {n}")
            setattr(self, name, col)

    def __len__(self) -> int:
        return len(getattr(self, next(iter(self.COLUMNS))))

    @classmethod
    def empty(cls, strings: StringPool | None = None) -> Self:
        make: Callable[..., Self] = cls  # the subclass's dataclass fields are its columns
        return make(strings or StringPool(), **{k: np.empty(0, v) for k, v in cls.COLUMNS.items()})

    def columns(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in self.COLUMNS}

    def name(self, column: str, row: int) -> str | None:
        return self.strings[int(getattr(self, column)[row])]


def recode(pool: StringPool, strings: StringPool, used: np.ndarray | None = None) -> np.ndarray:
    """A lookup array from codes of ``strings`` to codes of ``pool`` (interning them there), its
    last slot -1 so that absent codes stay absent; only the ``used`` codes when given."""
    table = np.full(len(strings) + 1, NONE, dtype=np.int32)
    codes = np.arange(len(strings)) if used is None else used[used >= 0]
    values = strings.values
    table[codes] = pool.codes([values[c] for c in codes.tolist()])
    return table

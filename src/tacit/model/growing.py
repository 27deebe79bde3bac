"""Columns that grow by appending at the cost of what is appended, not of what they hold.

A state that takes a few rows at a time and keeps many (the spans pending in online
reconstruction: the stream's rate times its windows and lateness) pays for every held row again
when each append is an ``np.concatenate``. These numpy arrays double their capacity when full
instead, so that an append costs its own rows (amortized), and are read and written through
views of their filled part.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt


class GrowingColumns:
    """Equal-length numpy columns (name → dtype) that rows are appended to and dropped from."""

    def __init__(self, dtypes: Mapping[str, npt.DTypeLike], capacity: int = 1024) -> None:
        self._n = 0
        self._cols = {name: np.empty(capacity, dtype=t) for name, t in dtypes.items()}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, name: str) -> np.ndarray:
        """The filled part of column ``name``: a view, so writing to it changes the column. An
        :meth:`extend` may move the column: take the view again after one."""
        return self._cols[name][: self._n]

    def extend(self, **values: np.ndarray) -> None:
        """Append rows: an array for every column, all of one length."""
        if values.keys() != self._cols.keys():
            raise ValueError(f"extend needs the columns {sorted(self._cols)}, got {sorted(values)}")
        lengths = {len(v) for v in values.values()}
        if len(lengths) != 1:
            raise ValueError(f"columns of different lengths {sorted(lengths)}")
        need = self._n + lengths.pop()
        capacity = len(next(iter(self._cols.values())))
        if need > capacity:
            capacity = max(need, 2 * capacity)
            for name, col in self._cols.items():
                grown = np.empty(capacity, dtype=col.dtype)
                grown[: self._n] = col[: self._n]
                self._cols[name] = grown
        for name, v in values.items():
            self._cols[name][self._n : need] = v
        self._n = need

    def keep(self, mask: np.ndarray) -> None:
        """Keep the rows where ``mask`` (one boolean per filled row) is true, in their order."""
        if len(mask) != self._n:
            raise ValueError(f"mask of {len(mask)} rows for {self._n}")
        for col in self._cols.values():
            kept = col[: self._n][mask]  # a copy, so the overlapping write below is safe
            col[: len(kept)] = kept
        self._n = int(np.count_nonzero(mask))

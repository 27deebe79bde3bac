"""What one capture point saw: a packet identifier and a timestamp per packet.

The one-way latency synopses only need, per packet, a 64-bit identifier that both capture points
compute identically (a digest of header fields that do not change in flight, e.g. the IP
identification, addresses, ports and a payload prefix) and the local timestamp in int64
nanoseconds on clocks synchronized between the two points. A capture reader produces these
columns; nothing in this package opens a file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tacit.errors import InputError


@dataclass(frozen=True)
class PacketStream:
    """Packets seen at one capture point: ``ident`` (uint64) and ``time`` (int64 ns) columns."""

    ident: np.ndarray
    time: np.ndarray

    def __post_init__(self) -> None:
        ident = np.asarray(self.ident)
        time = np.asarray(self.time)
        if ident.ndim != 1 or time.ndim != 1 or len(ident) != len(time):
            raise InputError(
                f"packet identifiers {ident.shape} and timestamps {time.shape} must be "
                "1-D columns of equal length"
            )
        for name, col in (("ident", ident), ("time", time)):
            if len(col) and not np.issubdtype(col.dtype, np.integer):
                raise InputError(f"packet {name} must be integers, got {col.dtype}")
        object.__setattr__(self, "ident", np.ascontiguousarray(ident, dtype=np.uint64))
        object.__setattr__(self, "time", np.ascontiguousarray(time, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.ident)

    def take(self, which: np.ndarray) -> PacketStream:
        """The packets selected by a boolean mask or an index array, in that order."""
        return PacketStream(self.ident[which], self.time[which])

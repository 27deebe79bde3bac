"""Byte streams: capture times of many offsets at once, and holes, against one offset at a time."""

from __future__ import annotations

import numpy as np

from tacit.formats.tcp_stream import ByteStream
from tacit.model.messages import MISSING


def test_times_of_many_offsets_equal_each_time_and_holes_follow_the_pieces():
    piece = np.array([0, 4, 9, 12], dtype=np.int64)
    times = np.array([100, MISSING, 300, 400], dtype=np.int64)
    held = np.array([True, False, True, True])
    s = ByteStream(bytes(20), piece, times, held, closed=True, start_seen=True)
    offsets = np.arange(-1, 25)
    assert s.times(offsets).tolist() == [s.time(int(o)) for o in offsets]
    assert s.times(np.array([0, 3, 4, 8, 9, 19])).tolist() == [100, 100, MISSING, MISSING, 300, 400]
    assert not s.whole and s.hole(3, 5) and s.hole(8, 10) and not s.hole(9, 20)
    whole = ByteStream(bytes(20), piece, times, np.ones(4, bool), closed=True, start_seen=True)
    assert whole.whole and not any(whole.hole(a, a + 3) for a in range(20))

"""HTTP/2 conversations made by the h2 library, a client and a server talking in memory, with
every chunk either side sends recorded as it would be captured: the HTTP/2 parser's ground truth."""

from __future__ import annotations

import numpy as np
from h2.config import H2Configuration
from h2.connection import H2Connection

from tacit.formats.tcp_stream import ByteStream
from tacit.model.messages import MISSING

CLIENT, SERVER = 0, 1
US = 1_000


class Conversation:
    """The two ends of one connection; ``chunks[side]`` holds (capture time, bytes) per write.

    Every action goes through :meth:`act`, which first delivers what is pending so that the
    offset it returns is where the action's first frame starts in that side's stream."""

    def __init__(self, client_settings: dict | None = None, server_settings: dict | None = None):
        self.ends = (
            H2Connection(H2Configuration(client_side=True, header_encoding="utf-8")),
            H2Connection(H2Configuration(client_side=False, header_encoding="utf-8")),
        )
        self.chunks: tuple[list, list] = ([], [])
        self.t = 0
        for end, settings in zip(self.ends, (client_settings, server_settings), strict=True):
            end.initiate_connection()
            if settings:
                end.update_settings(settings)  # a second SETTINGS frame
            self.flush()

    @property
    def client(self) -> H2Connection:
        return self.ends[CLIENT]

    @property
    def server(self) -> H2Connection:
        return self.ends[SERVER]

    def flush(self) -> None:
        """Deliver what either end has to send, each write one chunk, until both are quiet."""
        moved = True
        while moved:
            moved = False
            for side in (CLIENT, SERVER):
                out = self.ends[side].data_to_send()
                if out:
                    self.t += 10 * US
                    self.chunks[side].append((self.t, out))
                    self.ends[1 - side].receive_data(out)
                    moved = True

    def offset(self, side: int) -> int:
        return self.offset_of(side, len(self.chunks[side]))

    def offset_of(self, side: int, chunk: int) -> int:
        return sum(len(b) for _, b in self.chunks[side][:chunk])

    def act(self, side: int, action) -> tuple[int, int]:
        """Run ``action(end)`` on one end and deliver: the offsets of the first byte it sent and
        just after the last (the peer answers nothing but SETTINGS and PING acknowledgements)."""
        self.flush()
        at = self.offset(side)
        action(self.ends[side])
        self.flush()
        return at, self.offset(side)

    def stream(
        self, side: int, *, lost: tuple[int, ...] = (), first: int = 0, cut: int | None = None
    ) -> ByteStream:
        """One side as a reassembled stream: chunk indexes ``lost`` never captured, the capture
        starting at chunk ``first`` (its start then unseen), and cut after ``cut`` bytes."""
        chunks = self.chunks[side][first:]
        data = b"".join(
            b"\0" * len(b) if k + first in lost else b for k, (_, b) in enumerate(chunks)
        )
        sizes = np.array([len(b) for _, b in chunks], dtype=np.int64)
        piece = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        held = np.array([k + first not in lost for k in range(len(chunks))], dtype=bool)
        times = np.array([t for t, _ in chunks], dtype=np.int64)
        times[~held] = MISSING
        if cut is not None:
            data = data[:cut]
            keep = piece < cut
            piece, times, held = piece[keep], times[keep], held[keep]
        return ByteStream(data, piece, times, held, closed=cut is None, start_seen=first == 0)

    def streams(self) -> tuple[ByteStream, ByteStream]:
        return self.stream(CLIENT), self.stream(SERVER)

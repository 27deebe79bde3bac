"""The shared log of acknowledged requests when ``tacit serve`` runs as several processes: a
NATS JetStream stream, which ingest replicas append each request to before they acknowledge it,
and which the process that reconstructs reads in the stream's one order.

Why JetStream: it is a system operators already run, one binary, with an idempotent publish
(``Nats-Msg-Id``: a replica that retries after a lost answer does not append twice) and a
total order over every publisher, and a message the server acknowledged is on its disk, so it
survives the loss of the publisher, the reader or the server process (``docs/scale-out.md``
gives the measurements that chose it over Redis Streams and files on a shared filesystem).

The reader does not use the server's acknowledgements to know where it is: a message delivered
and not acknowledged comes again only after the acknowledgement wait, behind newer ones, which
would break the order windows are cut in. It reads from a sequence number it keeps itself, with
what it did with each message (:mod:`.log_feed`), and the stream drops what is below the
reader's position only when the reader purges it (:meth:`SpanLog.purge_below`).

The stream is bounded (``max_bytes``, new messages refused beyond): a full stream holds the
senders back, as a full service does (:class:`~.ingest.Busy`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from tacit.errors import ConfigError, TacitError
from tacit.serve.ingest import Busy

ENCODING = "Tacit-Encoding"
RECEIVED = "Tacit-Received-Ns"
"""The headers of a message: the request's encoding and when its replica received it."""
TIMEOUT_S = 5.0
"""How long a publish or a connection waits for the server."""
DUPLICATE_WINDOW_S = 120.0
"""How long the server remembers a message's id, to take a publish sent again once."""
RETRY_S = 1
"""The retry delay a replica gives its senders while the log is full or out of reach."""

_T = TypeVar("_T")
log = logging.getLogger("tacit.serve")


class LogUnavailable(TacitError):
    """The log could not be reached or did not answer in time: the request is not taken."""


@dataclass(frozen=True)
class Logged:
    """One request as the log holds it."""

    seq: int
    encoding: str
    received_ns: int
    body: bytes


async def _cancel_the_rest() -> None:
    """Cancel every task of the running loop but this one, and let them end."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class SpanLog:
    """A connection to the stream ``stream`` of the NATS server at ``url``, usable from any
    thread: the client runs on an event loop of its own."""

    def __init__(self, url: str, stream: str, max_bytes: int) -> None:
        self.url = url
        self.stream = stream
        self.subject = f"tacit.{stream}"
        self.max_bytes = max_bytes
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tacit-span-log", daemon=True
        )
        self._nc: Any = None
        self._js: Any = None
        self._away = False  # disconnected, and said so

    def open(self) -> SpanLog:
        """Connect, and make the stream if it is not there (or bound it as configured)."""
        from nats.js.errors import APIError

        self._thread.start()
        try:
            self._run(self._open(), TIMEOUT_S * 2)
        except (OSError, TimeoutError, LogUnavailable) as e:
            self.close()
            raise ConfigError(f"nats: cannot reach the NATS server at {self.url}: {e}") from None
        except APIError as e:  # such as a bound beyond the server's storage
            self.close()
            raise ConfigError(
                f"nats: the server at {self.url} refused the stream {self.stream!r}: "
                f"{e.description}"
            ) from None
        return self

    async def _open(self) -> None:
        import nats
        from nats.js.api import DiscardPolicy, StorageType, StreamConfig
        from nats.js.errors import NotFoundError

        self._nc = await nats.connect(
            self.url,
            connect_timeout=TIMEOUT_S,
            max_reconnect_attempts=-1,
            error_cb=self._told,
            disconnected_cb=self._gone,
            reconnected_cb=self._back,
        )
        self._js = self._nc.jetstream(timeout=TIMEOUT_S)
        config = StreamConfig(
            name=self.stream,
            subjects=[self.subject],
            storage=StorageType.FILE,
            discard=DiscardPolicy.NEW,
            max_bytes=self.max_bytes,
            duplicate_window=DUPLICATE_WINDOW_S,
        )
        try:
            info = await self._js.stream_info(self.stream)
        except NotFoundError:
            await self._js.add_stream(config)
            return
        if info.config.max_bytes != self.max_bytes:
            await self._js.update_stream(config)

    async def _told(self, error: Exception) -> None:
        if not self._away:  # once an outage, not at every attempt to reconnect
            log.warning("log %s: %s", self.url, error or type(error).__name__)

    async def _gone(self) -> None:
        log.warning("log %s: disconnected; reconnecting", self.url)
        self._away = True

    async def _back(self) -> None:
        log.info("log %s: reconnected", self.url)
        self._away = False

    def publish(self, body: bytes, encoding: str, received_ns: int) -> int:
        """Append one request; its sequence number once the server has it on disk. Raises
        :class:`~.ingest.Busy` when the stream is full, :class:`LogUnavailable` when the
        server cannot be reached in time."""
        from nats.js.errors import APIError

        headers = {
            "Nats-Msg-Id": hashlib.sha256(body).hexdigest(),
            ENCODING: encoding,
            RECEIVED: str(received_ns),
        }
        try:
            ack = self._run(self._js.publish(self.subject, body, headers=headers), TIMEOUT_S)
        except APIError as e:
            if "maximum" in str(e.description or ""):  # bytes or messages exceeded
                raise Busy(RETRY_S, "the log is full") from None
            raise LogUnavailable(f"the log refused the request: {e.description}") from None
        return int(ack.seq)

    def read(self, start: int, stop: threading.Event, wait_s: float = 0.5) -> Iterator[Logged]:
        """The requests from sequence number ``start`` on, in the stream's order, waiting for
        new ones until ``stop`` is set (each wait at most ``wait_s``)."""
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import ConsumerConfig, DeliverPolicy

        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)
        sub = self._run(
            self._js.subscribe(self.subject, ordered_consumer=True, config=config), TIMEOUT_S
        )
        try:
            while not stop.is_set():
                try:
                    msg = self._run(sub.next_msg(timeout=wait_s), wait_s + TIMEOUT_S)
                except (NatsTimeout, TimeoutError):
                    continue
                headers = msg.headers or {}
                yield Logged(
                    int(msg.metadata.sequence.stream),
                    headers.get(ENCODING, "protobuf"),
                    int(headers.get(RECEIVED, "0")),
                    msg.data,
                )
        finally:
            self._run(sub.unsubscribe(), TIMEOUT_S)

    def problem(self) -> str | None:
        """Why requests cannot be appended now, or None."""
        if self._nc is None or not self._nc.is_connected:
            return f"the log at {self.url} is out of reach"
        return None

    def purge_below(self, seq: int) -> None:
        """Drop the messages below ``seq``: the reader has made them its own. Below 2 there
        are none, and nothing is asked: JetStream takes a purge to 1 for the whole stream."""
        if seq > 1:
            self._run(self._js.purge_stream(self.stream, seq=seq), TIMEOUT_S)

    def messages(self) -> int:
        """The messages the stream holds."""
        return int(self._state(TIMEOUT_S).messages)

    def last_seq(self, timeout_s: float = TIMEOUT_S) -> int:
        """The sequence number of the newest message (0: none yet)."""
        return int(self._state(timeout_s).last_seq)

    def _state(self, timeout_s: float) -> Any:
        """The stream's state as the server gives it (JetStream's ``StreamState``)."""
        return self._run(self._js.stream_info(self.stream), timeout_s).state

    def close(self) -> None:
        """Disconnect, and end the client's loop with nothing of it left pending."""
        if not self._thread.is_alive():
            return
        try:
            if self._nc is not None:
                self._run(self._nc.close(), TIMEOUT_S)
            self._run(_cancel_the_rest(), TIMEOUT_S)
        except (OSError, TimeoutError, LogUnavailable):
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(TIMEOUT_S)

    def _run(self, coro: Coroutine[Any, Any, _T], timeout_s: float) -> _T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            if future.done():  # the call's own timeout (asyncio's is the built-in one)
                raise
            future.cancel()
            raise LogUnavailable(f"the NATS server at {self.url} did not answer in time") from None

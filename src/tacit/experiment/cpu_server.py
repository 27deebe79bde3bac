"""A single-threaded web server whose response latency comes from real CPU work, for Pirate's
§5.1 experiment.

Pirate §5.1 serves its web workload with WebPolygraph's single-threaded server ("each
client-to-server connection saturates at a load of 4K requests/second under 100% allocation of
a CPU core") and varies the CPU the server may use through cgroups. This server does the same
with the site of :mod:`.web_server`: one thread, one ``selectors`` loop over every connection,
requests served in arrival order, and each request spins for ``cpu_us`` microseconds of this
thread's CPU time (``time.thread_time``) before its response is written. The spin counts CPU
time, not wall time, so when a cgroup's CPU quota throttles the process the same work takes
longer: the response latency follows the CPU allocation as it would for a real server. The
default, 250 µs per request, is the paper's 4K requests/s per core.

Run as ``python -m tacit.experiment.cpu_server --host H [--port P] [--seed S] [--cpu-us U]``:
it prints its port on stdout and serves until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import selectors
import signal
import socket
import sys
import time

from tacit.experiment.web_server import SiteParams, generate_site, object_path, render

CPU_US = 250.0
"""CPU time per request (µs): Pirate §5.1's 4K requests/s per core."""

NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n"


def spin(seconds: float) -> None:
    """Use ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class CpuServer:
    """The server loop: :meth:`serve` until interrupted."""

    def __init__(self, host: str, port: int, seed: int, cpu_us: float) -> None:
        site = generate_site(SiteParams(), seed)
        self.responses = {
            object_path(site, i).encode(): HEAD % len(body) + body
            for i, body in ((i, render(site, i)) for i in range(len(site.sizes)))
        }
        self.cpu_s = cpu_us / 1e6
        self.listener = socket.create_server((host, port), backlog=128)
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.buffers: dict[socket.socket, bytearray] = {}

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._read(key.fileobj)  # type: ignore[arg-type]

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            conn, _ = self.listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.buffers[conn] = bytearray()
            self.selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.selector.unregister(conn)
            self.buffers.pop(conn, None)
            conn.close()
            return
        buf = self.buffers[conn]
        buf += data
        conn.setblocking(True)  # the client reads as it goes: a blocking send finishes
        while (end := buf.find(b"\r\n\r\n")) >= 0:
            line = bytes(buf[: buf.find(b"\r\n")])
            del buf[: end + 4]
            parts = line.split()
            spin(self.cpu_s)
            ok = len(parts) == 3 and parts[0] == b"GET"
            with contextlib.suppress(OSError):
                conn.sendall(self.responses.get(parts[1], NOT_FOUND) if ok else NOT_FOUND)
        conn.setblocking(False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu-us", type=float, default=CPU_US)
    args = parser.parse_args(argv)
    server = CpuServer(args.host, args.port, args.seed, args.cpu_us)
    print(server.port, flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve()


if __name__ == "__main__":
    main(sys.argv[1:])

"""The memcached variants of Pirate's live experiments: Debian's memcached, and two clients.

:class:`MemtierProtocol` is Pirate §5.7's workload, a memtier-style benchmark: each connection
has one request in flight (memtier's default pipeline of 1), gets and sets 1:1 over a keyspace
populated beforehand (:func:`populate_keys`), values of 40–10,000 bytes. The rest of this
module is the tree-walking variant of the loopback experiment:

Pirate (arXiv 2505.14358, §6) needs requests whose successors depend on their responses. Here
the items stored in memcached form the same kind of dependency trees as the web site
(:func:`.web_server.generate_site`): an item's value starts with the keys of its children, so a
client that gets a root learns which keys to get next, and so on down the tree; after reading
some items (a ``set_probability`` share of the keys) it also stores a small record of the visit
(a set named by that response). At most 4 requests are outstanding (pipelined) per connection, as
with the web clients (:func:`.web_clients.run_clients` drives both).

memcached answers in microseconds whatever it is asked and has no server-side delay to set, so
what varies over the run is the size of the values: the trees come in families whose values are
``value_sizes`` bytes, and a client takes its next tree from the family of the current step
(``step_seconds`` of Unix time each, cycling, on the grid of :class:`.web_server.ServiceTime`).
Larger values take longer to copy and move through the loopback, so the response latency steps
with them, from about a hundred microseconds to a few milliseconds. The sizes alternate small
and large: below some 100 kB, the latency on two busy cores is set by scheduling more than by
size, so only a step between a small and a large family is sure to show.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from tacit.errors import ConfigError
from tacit.experiment.capture import STOP_TIMEOUT, start_listening
from tacit.experiment.web_server import Site, SiteParams, generate_site

MEMCACHED = "/usr/bin/memcached"
START_TIMEOUT = 10.0


@dataclass(frozen=True)
class MemcachedParams:
    """Workload of the memcached run: one family of ``trees`` dependency trees per entry of
    ``value_sizes`` (bytes of every value in it), the family in use changing every
    ``step_seconds``; ``set_probability`` of a visit record after each get."""

    value_sizes: tuple[int, ...] = (1_000, 300_000, 8_000, 200_000)
    step_seconds: float = 2.0
    trees: int = 8
    set_probability: float = 0.3
    memory_mb: int = 256


def memcached_unavailable() -> str | None:
    """Why memcached cannot be started here (None when it can)."""
    if shutil.which(MEMCACHED) is None:
        return f"{MEMCACHED} not found (Debian package memcached)"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at ``host`` right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_memcached(port: int, memory_mb: int, host: str = "127.0.0.1") -> subprocess.Popen:
    """Start memcached on ``host:port`` (TCP only, ``-U 0``) in its own process group and wait
    until it accepts connections; stop it with :func:`.capture.stop_process`."""
    reason = memcached_unavailable()
    if reason:
        raise ConfigError(reason)
    return start_listening(
        memcached_command(host, port, memory_mb), host, port, "memcached", START_TIMEOUT
    )


def key(family: int, obj: int) -> str:
    return f"f{family}o{obj}"


def value(site: Site, family: int, obj: int, size: int) -> bytes:
    """An item's value: the keys of its children on the first line, padded to ``size``."""
    head = " ".join(key(family, c) for c in site.children[obj]).encode() + b"\n"
    return head + b"." * max(0, size - len(head))


def populate(address: tuple[str, int], site: Site, params: MemcachedParams) -> None:
    """Store every tree of every family (before the capture starts)."""
    with socket.create_connection(address, timeout=STOP_TIMEOUT) as s, s.makefile("rb") as f:
        for family, size in enumerate(params.value_sizes):
            for obj in range(len(site.sizes)):
                data = value(site, family, obj, size)
                s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key(family, obj).encode(), len(data), data))
                answer = f.readline()
                if answer != b"STORED\r\n":
                    raise ConfigError(f"memcached refused set {key(family, obj)}: {answer!r}")


CRLF = b"\r\n"


async def read_reply(reader: asyncio.StreamReader, target: str) -> tuple[int, bytes | None]:
    """Read memcached's text-protocol reply to ``target`` (``set …`` or ``get KEY``): its size
    in bytes and, for a get that found its key, the value (None for a set or a miss). Anything
    else memcached answers is a :class:`ConfigError`."""
    line = await reader.readline()
    if target.startswith("set"):
        if line != b"STORED" + CRLF:
            raise ConfigError(f"memcached answered {line!r} to {target}")
        return len(line), None
    if line == b"END" + CRLF:
        return len(line), None
    if not line.startswith(b"VALUE "):
        raise ConfigError(f"memcached answered {line!r} to {target}")
    length = int(line.split()[3])
    data = await reader.readexactly(length + 2)
    end = await reader.readline()
    if end != b"END" + CRLF:
        raise ConfigError(f"memcached answered {end!r} after the value of {target}")
    return len(line) + length + 2 + len(end), data[:length]


@dataclass(frozen=True)
class MemcachedProtocol:
    """Text-protocol gets down the trees, sets of visit records; see the module docstring."""

    site: Site
    params: MemcachedParams

    def root(self, rng: np.random.Generator, now: float) -> str:
        family = int(now // self.params.step_seconds) % len(self.params.value_sizes)
        return f"get {key(family, int(rng.choice(self.site.roots)))}"

    def request(self, target: str) -> bytes:
        verb, name = target.split(" ", 1)
        if verb == "set":
            return b"set %s 0 0 1\r\n1\r\n" % name.encode()
        return b"get %s\r\n" % name.encode()

    async def response(self, reader: asyncio.StreamReader, target: str) -> tuple[int, list[str]]:
        size, data = await read_reply(reader, target)
        if target.startswith("set"):
            return size, []
        if data is None:  # every item of a tree was stored before the run
            raise ConfigError(f"memcached answered {b'END' + CRLF!r} to {target}")
        named = [f"get {k}" for k in data[: data.index(b"\n")].decode().split()]
        # Whether a key's visits are recorded is a function of the key, so runs are reproducible.
        name = target[4:]
        if zlib.crc32(name.encode()) % 1000 < self.params.set_probability * 1000:
            named.append(f"set seen:{name}")
        return size, named


@dataclass(frozen=True)
class MemtierParams:
    """Pirate §5.7's memtier run: ``connections`` (10 threads of one connection each), gets
    and sets ``get_share`` : 1 − ``get_share`` (1:1), values uniform in ``value_bytes``
    (40–10,000), over ``keys`` keys (chosen: 1,000, populated first so that gets hit, as the
    paper's "data size for responses" implies)."""

    connections: int = 10
    get_share: float = 0.5
    value_bytes: tuple[int, int] = (40, 10_000)
    keys: int = 1_000


@dataclass(frozen=True)
class MemtierProtocol:
    """Random gets and sets, one per "tree" (:func:`.web_clients.run_clients` sends the next
    as soon as the response is read); a target is ``get KEY`` or ``set KEY SIZE``.

    memtier is C: between reading a response and sending the next request it spends about a
    microsecond, and Pirate measures that turnaround with the response (§3.1, §5.1's
    req-to-req). So the draws and the bytes of a request are kept cheap here: uniform draws
    instead of ``rng.integers`` and one value buffer, sliced, instead of a new one per set.
    """

    params: MemtierParams
    padding: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "padding", b"v" * self.params.value_bytes[1])

    def root(self, rng: np.random.Generator, now: float) -> str:
        # Uniform draws as rng.random() scaled: cheaper than rng.integers, which counts here
        # (see the class docstring).
        k = f"k{int(rng.random() * self.params.keys)}"
        if rng.random() < self.params.get_share:
            return f"get {k}"
        lo, hi = self.params.value_bytes
        return f"set {k} {lo + int(rng.random() * (hi - lo + 1))}"

    def request(self, target: str) -> bytes:
        verb, name, *size = target.split(" ")
        if verb == "set":
            n = int(size[0])
            return b"set %s 0 0 %d\r\n%s\r\n" % (name.encode(), n, self.padding[:n])
        return b"get %s\r\n" % name.encode()

    async def response(self, reader: asyncio.StreamReader, target: str) -> tuple[int, list[str]]:
        size, _ = await read_reply(reader, target)  # a miss (the key was evicted) is an answer
        return size, []


def populate_keys(address: tuple[str, int], params: MemtierParams, seed: int) -> None:
    """Store every key of the keyspace with a value of random size, retrying the connection for
    up to :data:`START_TIMEOUT` seconds while memcached starts."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            conn = socket.create_connection(address, timeout=STOP_TIMEOUT)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                raise ConfigError(f"memcached at {address[0]}:{address[1]}: {e}") from None
            time.sleep(0.05)
    rng = np.random.default_rng([seed, 7])
    protocol = MemtierProtocol(params)
    lo, hi = params.value_bytes
    with conn, conn.makefile("rb") as f:
        for k in range(params.keys):
            conn.sendall(protocol.request(f"set k{k} {int(rng.integers(lo, hi + 1))}"))
            answer = f.readline()
            if answer != b"STORED\r\n":
                raise ConfigError(f"memcached refused set k{k}: {answer!r}")


def memcached_command(host: str, port: int, memory_mb: int) -> list[str]:
    """The memcached command line: TCP only (``-U 0``), one worker thread."""
    cmd = [MEMCACHED, "-l", host, "-p", str(port), "-U", "0", "-m", str(memory_mb), "-t", "1"]
    return cmd + (["-u", "root"] if os.geteuid() == 0 else [])  # memcached refuses root


def memcached_site(params: MemcachedParams, seed: int) -> Site:
    """The trees stored in memcached: ``params.trees`` of them, shaped as the web site's."""
    return generate_site(SiteParams(pages=params.trees), seed)


def main(argv: list[str] | None = None) -> None:
    """``populate --address HOST:PORT [--seed S]``: store :class:`MemtierParams`' keyspace
    (run inside the client's network namespace by the asymmetric experiment)."""
    parser = argparse.ArgumentParser(prog="python -m tacit.experiment.memcached")
    sub = parser.add_subparsers(dest="command", required=True)
    fill = sub.add_parser("populate")
    fill.add_argument("--address", required=True)
    fill.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    host, _, port = args.address.rpartition(":")
    populate_keys((host, int(port)), MemtierParams(), args.seed)


if __name__ == "__main__":
    main(sys.argv[1:])

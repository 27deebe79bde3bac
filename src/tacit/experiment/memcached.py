"""The memcached variant of Pirate's live experiment: Debian's memcached and a get/set client.

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
with them, from about a hundred microseconds to a few milliseconds.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
import zlib
from dataclasses import dataclass

import numpy as np

from tacit.errors import ConfigError
from tacit.experiment.capture import STOP_TIMEOUT, stop_process
from tacit.experiment.web_server import Site, SiteParams, generate_site

MEMCACHED = "/usr/bin/memcached"
START_TIMEOUT = 10.0


@dataclass(frozen=True)
class MemcachedParams:
    """Workload of the memcached run: one family of ``trees`` dependency trees per entry of
    ``value_sizes`` (bytes of every value in it), the family in use changing every
    ``step_seconds``; ``set_probability`` of a visit record after each get."""

    value_sizes: tuple[int, ...] = (1_000, 64_000, 8_000, 200_000)
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
    cmd = [MEMCACHED, "-l", host, "-p", str(port), "-U", "0", "-m", str(memory_mb), "-t", "1"]
    cmd += ["-u", "root"] if os.geteuid() == 0 else []  # memcached refuses root without -u
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_process(proc)
                said = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
                raise ConfigError(f"memcached did not start on {host}:{port}: {said}") from None
            time.sleep(0.02)


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
        line = await reader.readline()
        if target.startswith("set"):
            if line != b"STORED\r\n":
                raise ConfigError(f"memcached answered {line!r} to {target}")
            return len(line), []
        if not line.startswith(b"VALUE "):
            raise ConfigError(f"memcached answered {line!r} to {target}")
        length = int(line.split()[3])
        data = await reader.readexactly(length + 2)
        end = await reader.readline()
        if end != b"END\r\n":
            raise ConfigError(f"memcached answered {end!r} after the value of {target}")
        named = [f"get {k}" for k in data[: data.index(b"\n")].decode().split()]
        # Whether a key's visits are recorded is a function of the key, so runs are reproducible.
        name = target[4:]
        if zlib.crc32(name.encode()) % 1000 < self.params.set_probability * 1000:
            named.append(f"set seen:{name}")
        return len(line) + length + 2 + len(end), named


def memcached_site(params: MemcachedParams, seed: int) -> Site:
    """The trees stored in memcached: ``params.trees`` of them, shaped as the web site's."""
    return generate_site(SiteParams(pages=params.trees), seed)

"""The configuration of ``tacit serve``: a YAML file, every field optional, each also given by
an environment variable (:data:`ENV_PREFIX`); the command line's options override both.

::

    http: 127.0.0.1:4318        # OTLP/HTTP receiver, Jaeger query API, web page, /metrics
    grpc: 127.0.0.1:4317        # OTLP/gRPC receiver; "" turns it off
    database: tacit.duckdb      # the embedded store (created when absent)
    database_memory_mib: 1024   # the most memory DuckDB caches the store in
    callgraph: callgraph.json   # what `tacit callgraph` writes; none: learned from the spans
    forward: http://collector:4318/v1/traces   # finished traces sent on as OTLP/HTTP
    forward_protocol: http/protobuf   # or http/json
    forward_compression: gzip   # or none
    forward_headers: {Authorization: Bearer abc}   # sent with each (a variable: k=v,k2=v2)
    max_pending_spans: 400000   # not yet reconstructed: beyond, 429 or RESOURCE_EXHAUSTED
    retry_after_s: 1            # the retry hint sent with a refusal
    idle_s: 1                   # quiet this long, the stream's clock moves on by the time passed
    max_future_s: 600           # a span ending later after it came is stored unreconstructed
    retention_s: 259200         # what was taken in longer ago is deleted (0, the default: kept)
    online:                     # TraceWeaver §5.3 windows, in seconds
      window_s: 5
      lookahead_s: 2
      max_request_s: 10
      lateness_s: 7             # the SDK's batch processor sends every 5 s
    dask: tcp://scheduler:8786  # each round's instances reconstructed on this Dask cluster
    role: all                   # all (one process), ingest, reconstruct or query: docs/scale-out.md
    nats: nats://nats:4222      # the shared log of the ingest and reconstruct roles (JetStream)
    nats_stream: tacit          # its stream's name
    nats_max_bytes: 8589934592  # its bound: beyond, the ingest replicas hold senders back
    blocks: /shared/tacit-blocks    # finished traces as Parquet blocks, which query replicas read
    json_logs: false            # the log as JSON objects, one a line
    log_level: info             # debug, info, warning or error
    pirate_interface: eth0      # Pirate: response latency from a live capture (libpcap)
    pirate_pcap: capture.pcap   # ... and/or from a capture file, read once at start
    pirate_server: 10.0.0.5:443 # the server (ADDR:PORT, ADDR or PORT; default: from handshakes)
    pirate_filter: tcp port 443 # a BPF filter of the captured packets
    pirate_epoch_s: 1           # one estimate per connection per epoch (Pirate: 0.1 s)
    rda_results: [receiver.jsonl]   # RDA agents' --output files, followed as they grow
    capture_interface: eth0     # spans from packets: every exchange captured live (libpcap)
    capture_pcap: app.pcap      # ... and/or from a capture file, read once
    capture_filter: tcp port 8080   # a BPF filter of the captured packets
    capture_services: pods.json # names of addresses (as `tacit capture --services`)
    capture_protocol: auto      # auto, http, http2, redis or memcached
    envoy_logs: [sidecars/]     # Envoy/Istio sidecar access logs, one file per sidecar, followed
    ingest_token_file: token    # senders must give Authorization: Bearer <its first line>
    query_token_file: reader    # every GET but /healthz, /readyz must give its first line
    tls_cert_file: cert.pem     # HTTPS and gRPC over TLS with this certificate (PEM) ...
    tls_key_file: key.pem       # ... and its key (both or neither)

The defaults listen on loopback only: without an ingest token, the receivers take spans from
anyone who can connect, and without a query token anyone may read; without TLS, what is sent
and what the query API answers cross the network in the clear.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from tacit.config_fields import fields, flag, get, number, read_yaml
from tacit.errors import ConfigError
from tacit.formats.exchanges import PROTOCOLS
from tacit.reconstruct.online import NS, OnlineParams
from tacit.response_latency import PirateParams
from tacit.serve import forward

SERVE_ONLINE = OnlineParams(
    window_ns=5 * NS, lookahead_ns=2 * NS, max_request_ns=10 * NS, lateness_ns=7 * NS
)
"""Windows for spans from OpenTelemetry SDKs, whose batch span processor exports every 5 s by
default (``OTEL_BSP_SCHEDULE_DELAY``): a span may arrive that much after one that ended later,
so the lateness is 7 s; requests are taken to last at most 10 s.

The window is the longest of TraceWeaver §5.3's examples (1–5 s). A span in the lookahead is
reconstructed again in the next round, and each round refits the delay models, so CPU per span
falls as the window grows against the lookahead, for traces that finish later and a little more
memory (``bench/bench_serve.py sustained`` measures both). A round takes the spans up to its
lookahead only, not those the lateness lets in beyond it, which the next round reconstructs
anyway (``bench/bench_serve_stages.py --lateness 7`` measures the cost a span)."""

MAX_PORT = 65535
MAX_PENDING_SPANS = 100_000_000
"""The largest max_pending_spans taken: the queue it bounds is held in memory."""
MAX_DATABASE_MEMORY_MIB = 2**30
"""The largest database_memory_mib taken, a pebibyte: DuckDB refuses a limit beyond 2**43 MiB
with a parser error, and no machine holds that much."""
MAX_FUTURE_S = 86_400.0
"""The largest max_future_s taken: a day."""
LOG_LEVELS = ("debug", "info", "warning", "error")
ENV_PREFIX = "TACIT_"
"""Every field can also be given as an environment variable: ``TACIT_`` and its name in capitals
(``TACIT_HTTP``, ``TACIT_DATABASE_MEMORY_MIB``; the windows ``TACIT_ONLINE_WINDOW_S``), as the
Collector and Tempo take theirs; a list as paths separated by commas."""
_FIELDS = (
    "http",
    "grpc",
    "database",
    "database_memory_mib",
    "callgraph",
    "forward",
    "forward_protocol",
    "forward_compression",
    "forward_headers",
    "max_pending_spans",
    "retry_after_s",
    "idle_s",
    "max_future_s",
    "retention_s",
    "online",
    "dask",
    "role",
    "nats",
    "nats_stream",
    "nats_max_bytes",
    "blocks",
    "json_logs",
    "log_level",
    "pirate_interface",
    "pirate_pcap",
    "pirate_server",
    "pirate_filter",
    "pirate_epoch_s",
    "rda_results",
    "capture_interface",
    "capture_pcap",
    "capture_filter",
    "capture_services",
    "capture_protocol",
    "envoy_logs",
    "ingest_token_file",
    "query_token_file",
    "tls_cert_file",
    "tls_key_file",
)
_ONLINE_FIELDS = ("window_s", "lookahead_s", "max_request_s", "lateness_s")
_STRINGS = (
    "http",
    "grpc",
    "dask",
    "role",
    "nats",
    "nats_stream",
    "forward",
    "forward_protocol",
    "forward_compression",
    "log_level",
    "pirate_interface",
    "pirate_server",
    "pirate_filter",
    "capture_interface",
    "capture_filter",
    "capture_protocol",
)
_PATHS = (
    "database",
    "blocks",
    "callgraph",
    "pirate_pcap",
    "capture_pcap",
    "capture_services",
    "ingest_token_file",
    "query_token_file",
    "tls_cert_file",
    "tls_key_file",
)
_PATH_LISTS = ("rda_results", "envoy_logs")
ROLES = ("all", "ingest", "reconstruct", "query")
_STREAM_NAME = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class ServeConfig:
    """Where ``tacit serve`` listens and stores, and how it reconstructs."""

    callgraph: Path | None = None
    http: str = "127.0.0.1:4318"
    grpc: str = "127.0.0.1:4317"
    database: Path = Path("tacit.duckdb")
    database_memory_mib: int = 1024
    """DuckDB's memory limit for the store (its own default is 80% of the machine's memory,
    which its cache of the stored spans grows into): beyond it, DuckDB evicts what it cached.
    With the pending spans bounded too, the service's memory stays bounded however much it
    stores (``bench/bench_serve.py burst``)."""
    forward: str | None = None
    forward_protocol: str = "http/protobuf"
    forward_compression: str = "gzip"
    forward_headers: tuple[tuple[str, str], ...] = ()
    max_pending_spans: int = 400_000
    """Spans acknowledged and not yet in a finished trace, at most. A steady stream keeps about
    its rate times ``window_s + lookahead_s + lateness_s`` pending (14 s of its spans with
    :data:`SERVE_ONLINE`), each held in memory."""
    retry_after_s: int = 1
    idle_s: float = 1.0
    """With no request for this long, the stream's clock moves on by the wall time that passed
    (so the last traces before a pause finish). A sender replaying spans faster than real time
    that pauses longer than this finds its next spans late."""
    max_future_s: float = 600.0
    """How far after the receiver's clock, when its request came, a span may end and still be
    reconstructed: further, it is stored alone (counted as ``future``). The stream's clock is
    the latest span end; one span from the far future would move it past every span to come,
    which would all be late. Ten minutes is a clock far off; Loki and Mimir refuse samples
    about as far ahead (their creation grace periods)."""
    retention_s: float = 0.0
    """Spans, traces and latency series taken in longer ago than this are deleted
    (:meth:`~tacit.serve.store.Store.expire`), checked every tenth of it (at most every
    minute); 0 keeps everything."""
    online: OnlineParams = field(default_factory=lambda: SERVE_ONLINE)
    dask: str | None = None
    """The address of a Dask scheduler: each round's offline step runs there, by instance
    (:class:`tacit.reconstruct.scaleout.DaskRounds`), with the same result as here."""
    role: str = "all"
    """``all``: one process takes, reconstructs, stores and serves; ``ingest``: a replica
    that takes spans into the shared log on ``nats`` (:mod:`.log_ingest`); ``reconstruct``:
    the one process that reads the log and reconstructs, stores and serves (:mod:`.log_feed`);
    ``query``: a replica answering queries from the ``blocks`` (:mod:`.store_blocks`)."""
    nats: str | None = None
    """The NATS server (``nats://HOST:PORT``) whose JetStream holds the shared log."""
    nats_stream: str = "tacit"
    nats_max_bytes: int = 8 * 1024**3
    blocks: Path | None = None
    """A directory (on a filesystem the replicas share) that the process storing traces
    writes them to as Parquet blocks, and query replicas read (with those of every
    reconstruct role writing in a directory of its own under it: one per application)."""
    json_logs: bool = False
    log_level: str = "info"
    pirate_interface: str | None = None
    pirate_pcap: Path | None = None
    pirate_server: str | None = None
    pirate_filter: str = ""
    pirate: PirateParams = field(default_factory=PirateParams)
    """Pirate's parameters (the paper's, but for the epoch, which ``pirate_epoch_s`` sets)."""
    rda_results: tuple[Path, ...] = ()
    capture_interface: str | None = None
    capture_pcap: Path | None = None
    capture_filter: str = ""
    capture_services: Path | None = None
    capture_protocol: str = "auto"
    envoy_logs: tuple[Path, ...] = ()
    """Sidecar access logs (files, or directories of one file per sidecar) followed as they
    grow (:mod:`.envoy_feed`); ``capture_services`` names their pods."""
    ingest_token_file: Path | None = None
    """A file whose first line is the token every request bringing data must carry
    (:mod:`tacit.serve.auth`); none: anyone who can connect may send."""
    query_token_file: Path | None = None
    """A file whose first line every GET but the health checks must carry, as a bearer token or
    a Basic password (:mod:`tacit.serve.auth`); none: anyone who can connect may read."""
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    """A PEM certificate (chain) and its key: both listeners then speak TLS (:mod:`.tls`)."""

    def __post_init__(self) -> None:  # noqa: C901, PLR0912
        for name in ("http", "grpc"):
            address = getattr(self, name)
            if not address and name == "grpc":
                continue  # turned off
            port = address.rpartition(":")[2]
            if not (port.isascii() and port.isdigit() and int(port) <= MAX_PORT):
                raise ConfigError(f"{name}: {address!r} is not HOST:PORT with a port 0 to 65535")
        if self.forward is not None and urlsplit(self.forward).scheme not in ("http", "https"):
            raise ConfigError(f"forward: {self.forward!r} is not an http:// or https:// URL")
        for setting, chosen, allowed in (
            ("forward_protocol", self.forward_protocol, forward.PROTOCOLS),
            ("forward_compression", self.forward_compression, forward.COMPRESSIONS),
        ):
            if chosen not in allowed:
                raise ConfigError(f"{setting}: {chosen!r} is not one of {', '.join(allowed)}")
        if not 0 < self.max_pending_spans <= MAX_PENDING_SPANS:
            raise ConfigError(f"max_pending_spans must be 1 to {MAX_PENDING_SPANS:,}")
        if not 0 < self.database_memory_mib <= MAX_DATABASE_MEMORY_MIB:
            raise ConfigError(f"database_memory_mib must be 1 to {MAX_DATABASE_MEMORY_MIB:,}")
        if not 0 < self.max_future_s <= MAX_FUTURE_S:
            raise ConfigError(f"max_future_s must be above 0 and at most {MAX_FUTURE_S:g}")
        if not 0 <= self.retention_s < math.inf:
            raise ConfigError(f"retention_s must be a finite number >= 0, got {self.retention_s}")
        for source, given in (
            ("pirate", {"pirate_server": self.pirate_server, "pirate_filter": self.pirate_filter}),
            ("capture", {"capture_filter": self.capture_filter,
                         "capture_protocol": self.capture_protocol != "auto"}),
        ):  # fmt: skip
            has_source = getattr(self, f"{source}_interface") or getattr(self, f"{source}_pcap")
            for name, value in given.items():
                if value and not has_source:
                    flag = "--" + name.replace("_", "-")
                    raise ConfigError(
                        f"{name} ({flag}) goes with {source}_interface or {source}_pcap"
                    )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("tls_cert_file and tls_key_file go together: give both or neither")
        if self.role not in ROLES:
            raise ConfigError(f"role: {self.role!r} is not one of {', '.join(ROLES)}")
        if (self.role in ("ingest", "reconstruct")) != (self.nats is not None):
            raise ConfigError(
                "nats goes with role ingest or reconstruct: both write or read the shared log there"
            )
        if self.role == "query" and self.blocks is None:
            raise ConfigError("role query reads the blocks: give blocks (--blocks DIR)")
        if not _STREAM_NAME.fullmatch(self.nats_stream):
            raise ConfigError(f"nats_stream: {self.nats_stream!r} is not letters, digits, - and _")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(
                f"log_level: {self.log_level!r} is not one of {', '.join(LOG_LEVELS)}"
            )
        if self.capture_protocol not in ("auto", *PROTOCOLS):
            raise ConfigError(
                f"capture_protocol: {self.capture_protocol!r} is not one of auto, "
                f"{', '.join(PROTOCOLS)}"
            )

    def updated(self, **changes: Any) -> ServeConfig:
        """This configuration with the fields given (None values left as they are)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def load_config(
    path: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    given: Mapping[str, Any] | None = None,
) -> ServeConfig:
    """The configuration in the YAML file ``path`` (None: the defaults), with what ``environ``
    gives as ``TACIT_*`` variables (:data:`ENV_PREFIX`) over it, and the fields ``given`` (the
    command line's; None values left out) over both; a ``pirate_epoch_ns`` in ``given`` sets
    the epoch of the Pirate parameters. Relative paths in the file are taken from its
    directory, in a variable from the working directory. Unknown fields and bad values are
    one-line errors naming the field, or the variable. Settings that go together (a role and
    its log, a certificate and its key) are checked once all three are in, so that each may
    come from any of them."""
    data: dict[str, Any] = {}
    where, base = "the environment", Path()
    if path is not None:
        where, base = str(path), Path(path).parent
        data = dict(fields(read_yaml(path) or {}, where, _FIELDS))
    for variable, key, value in _environment(environ or {}):
        _settings({key: value}, variable, Path())  # refused here, named by its variable
        if key == "online":
            data["online"] = {**(data.get("online") or {}), **value}
        else:
            data[key] = _absolute(key, value) if path is not None else value
    settings = _settings(data, where, base)
    given = {k: v for k, v in (given or {}).items() if v is not None}
    if "pirate_epoch_ns" in given:
        pirate = settings.get("pirate", PirateParams())
        settings["pirate"] = replace(pirate, epoch_ns=given.pop("pirate_epoch_ns"))
    return ServeConfig(**{**settings, **given})


def _environment(environ: Mapping[str, str]) -> list[tuple[str, str, Any]]:
    """(variable, field, value) of every setting ``environ`` gives (:data:`ENV_PREFIX`):
    strings and paths as they are, lists split at commas, the rest read as YAML scalars."""
    found = []
    names: list[tuple[str, str, str | None]] = [(key, key, None) for key in _FIELDS]
    names += [(f"online_{sub}", "online", sub) for sub in _ONLINE_FIELDS]
    for name, key, sub in names:
        variable = ENV_PREFIX + name.upper()
        if variable not in environ:
            continue
        text = environ[variable]
        value: Any
        if key in _STRINGS or key in _PATHS:
            value = text
        elif key in _PATH_LISTS:
            value = [part for part in text.split(",") if part]
        elif key == "forward_headers":  # as OTEL_EXPORTER_OTLP_HEADERS has them
            pairs = [part.partition("=") for part in text.split(",") if part.strip()]
            value = {k.strip(): v.strip() for k, _, v in pairs}
        else:
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError:
                raise ConfigError(f"{variable}: {text!r} is not a value") from None
        found.append((variable, key, value if sub is None else {sub: value}))
    return found


def _absolute(key: str, value: Any) -> Any:
    """A path of a variable, from the working directory (the file's fields are from its
    directory)."""
    if key in _PATHS and isinstance(value, str) and value:
        return str(Path(value).absolute())
    if key in _PATH_LISTS:
        return [str(Path(v).absolute()) for v in value]
    return value


def _settings(data: Mapping[str, Any], where: str, base: Path) -> dict[str, Any]:  # noqa: C901, PLR0912
    """The keyword arguments of :class:`ServeConfig` that ``data`` (fields as in the file)
    gives, checked."""
    kwargs: dict[str, Any] = {}
    for key in _STRINGS:
        if key in data:
            value = get(data, key, where)
            if not isinstance(value, str):
                raise ConfigError(f"{where}: field '{key}' must be a string, got {value!r}")
            kwargs[key] = value
    for key in _PATHS:
        if key in data:
            kwargs[key] = _path(data, key, where, base)
    for key in _PATH_LISTS:
        if key in data:
            files = get(data, key, where)
            names = [{key: f} for f in (files if isinstance(files, list) else [files])]
            kwargs[key] = tuple(_path(n, key, where, base) for n in names)
    if "pirate_epoch_s" in data:
        epoch_ns = round(number(data, "pirate_epoch_s", where, positive=True, maximum=3600) * NS)
        kwargs["pirate"] = PirateParams(epoch_ns=epoch_ns)
    if "max_pending_spans" in data:
        kwargs["max_pending_spans"] = number(
            data, "max_pending_spans", where, positive=True, integer=True
        )
    if "database_memory_mib" in data:
        kwargs["database_memory_mib"] = number(
            data,
            "database_memory_mib",
            where,
            positive=True,
            integer=True,
            maximum=MAX_DATABASE_MEMORY_MIB,
        )
    if "nats_max_bytes" in data:
        kwargs["nats_max_bytes"] = number(
            data, "nats_max_bytes", where, positive=True, integer=True
        )
    if "retry_after_s" in data:
        kwargs["retry_after_s"] = number(data, "retry_after_s", where, positive=True, integer=True)
    if "idle_s" in data:
        kwargs["idle_s"] = number(data, "idle_s", where, positive=True, maximum=3600)
    if "max_future_s" in data:
        kwargs["max_future_s"] = number(
            data, "max_future_s", where, positive=True, maximum=MAX_FUTURE_S
        )
    if "retention_s" in data:
        kwargs["retention_s"] = number(data, "retention_s", where, positive=False)
    if "json_logs" in data:
        kwargs["json_logs"] = flag(data, "json_logs", where)
    if "forward_headers" in data:
        headers = get(data, "forward_headers", where)
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in headers.items()
        ):
            raise ConfigError(
                f"{where}: field 'forward_headers' must map header names to strings, "
                f"got {headers!r}"
            )
        kwargs["forward_headers"] = tuple(headers.items())
    if "online" in data:
        at = f"{where}: online"
        online = fields(data["online"], at, _ONLINE_FIELDS)
        d = SERVE_ONLINE
        kwargs["online"] = OnlineParams(
            window_ns=_ns(online, "window_s", at, d.window_ns, positive=True),
            lookahead_ns=_ns(online, "lookahead_s", at, d.lookahead_ns, positive=True),
            max_request_ns=_ns(online, "max_request_s", at, d.max_request_ns, positive=True),
            lateness_ns=_ns(online, "lateness_s", at, d.lateness_ns, positive=False),
        )
    return kwargs


def _ns(data: Any, key: str, where: str, default_ns: int, *, positive: bool) -> int:
    return round(number(data, key, where, default_ns / NS, positive=positive, maximum=3600) * NS)


def _path(data: Any, key: str, where: str, base: Path) -> Path:
    value = get(data, key, where)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: field '{key}' must be a path, got {value!r}")
    return base / value

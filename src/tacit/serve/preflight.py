"""What ``tacit serve`` reads before it starts, read and checked without starting: the files
the configuration names (the call graph, tokens, TLS certificate and key, service names,
captures, sidecar logs), so that ``tacit serve --check-config`` says what would stop a start
without opening the store or listening."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tacit.errors import ConfigError
from tacit.extras import require_extra
from tacit.formats.capture_spans import read_service_map
from tacit.reconstruct.callgraph import CallGraph
from tacit.serve.auth import read_token
from tacit.serve.config import ServeConfig
from tacit.serve.tls import load_tls


@dataclass(frozen=True)
class Preflight:
    """A configuration checked: its call graph (None: to be learned from the spans)."""

    config: ServeConfig
    callgraph: CallGraph | None

    def summary(self) -> dict[str, Any]:
        """What the service would start with, for ``--check-config``."""
        cfg = self.config
        return {
            "http": cfg.http,
            "grpc": cfg.grpc or None,
            "database": str(cfg.database),
            "callgraph": (
                "learned from the spans" if self.callgraph is None else str(cfg.callgraph)
            ),
            "endpoints": None if self.callgraph is None else len(self.callgraph.endpoints),
            "tls": cfg.tls_cert_file is not None,
            "ingest_token": cfg.ingest_token_file is not None,
            "query_token": cfg.query_token_file is not None,
            "forward": cfg.forward,
            "role": cfg.role,
            "nats": cfg.nats,
            "dask": cfg.dask,
            "blocks": None if cfg.blocks is None else str(cfg.blocks),
            "log_level": cfg.log_level,
        }


def _extras(cfg: ServeConfig) -> None:
    """Check that the extras the roles and the Dask cluster need are installed."""
    if cfg.role in ("ingest", "reconstruct"):
        require_extra("cluster", f"tacit serve --role {cfg.role}")
    if cfg.dask is not None:
        require_extra("dask", "tacit serve --dask")


def preflight(cfg: ServeConfig) -> Preflight:  # noqa: C901
    """Read and check what ``cfg`` names, as the service's start would; a problem is a
    :class:`~tacit.errors.ConfigError` (or the reader's :class:`~tacit.errors.InputError`)
    naming the file."""
    _extras(cfg)
    for pcap in (cfg.pirate_pcap, cfg.capture_pcap):
        if pcap is not None and not pcap.is_file():
            raise ConfigError(f"{pcap}: no such capture file")
    for logs in cfg.envoy_logs:
        if not logs.exists():
            raise ConfigError(f"{logs}: no such sidecar log file or directory")
    for followed in cfg.rda_results:
        if followed.is_dir():
            raise ConfigError(f"{followed}: a directory, not an RDA agent's results file")
    if cfg.callgraph is not None and not cfg.callgraph.exists():
        raise ConfigError(f"{cfg.callgraph}: no such call graph file")
    if cfg.ingest_token_file is not None:
        read_token(cfg.ingest_token_file)
    if cfg.query_token_file is not None:
        read_token(cfg.query_token_file, "query_token_file")
    if cfg.tls_cert_file is not None and cfg.tls_key_file is not None:
        load_tls(cfg.tls_cert_file, cfg.tls_key_file)
    if cfg.capture_services is not None:
        read_service_map(cfg.capture_services)
    return Preflight(cfg, CallGraph.load(cfg.callgraph) if cfg.callgraph else None)

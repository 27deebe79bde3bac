"""``tacit serve``'s settings as operators give them: a file, ``TACIT_*`` variables over it, the
command line over both; ``--check-config`` checks them without starting, ``--log-level`` sets
what the log says; a missing extra is named in one line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from clirun import one_error_line, run_here
from serve_app import shop_callgraph
from tacit.errors import ConfigError
from tacit.serve.config import SERVE_ONLINE, ServeConfig, load_config
from tacit.serve.logs import configure_logging


def test_variables_set_what_the_file_does_and_override_it(tmp_path, monkeypatch):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "serve.yaml").write_text(
        "http: 127.0.0.1:4000\ndatabase: store.duckdb\nonline: {window_s: 4, lateness_s: 3}\n"
    )
    monkeypatch.chdir(tmp_path)
    environ = {
        "TACIT_HTTP": "0.0.0.0:5000",
        "TACIT_DATABASE_MEMORY_MIB": "512",
        "TACIT_JSON_LOGS": "true",
        "TACIT_ONLINE_WINDOW_S": "3",
        "TACIT_RDA_RESULTS": "a.jsonl,b.jsonl",
        "TACIT_INGEST_TOKEN_FILE": "token",
        "TACIT_MAX_INFLATE_RATIO": "100",  # a reader's, not the service's: left alone
    }
    cfg = load_config(tmp_path / "etc" / "serve.yaml", environ)
    assert cfg.http == "0.0.0.0:5000"
    assert cfg.database == tmp_path / "etc" / "store.duckdb"  # the file's, from its directory
    assert cfg.database_memory_mib == 512 and cfg.json_logs
    assert cfg.online.window_ns == 3 * 10**9 and cfg.online.lateness_ns == 3 * 10**9
    assert cfg.online.lookahead_ns == SERVE_ONLINE.lookahead_ns
    assert cfg.rda_results == (tmp_path / "a.jsonl", tmp_path / "b.jsonl")  # from here
    assert cfg.ingest_token_file == tmp_path / "token"
    alone = load_config(None, {"TACIT_GRPC": "", "TACIT_LOG_LEVEL": "debug"})
    assert alone == ServeConfig(grpc="", log_level="debug")
    headers = load_config(None, {"TACIT_FORWARD_HEADERS": "Authorization=Bearer a=b, X-Org=7"})
    assert headers.forward_headers == (("Authorization", "Bearer a=b"), ("X-Org", "7"))
    assert load_config(None, {}) == ServeConfig()


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("TACIT_DATABASE_MEMORY_MIB", "lots", "TACIT_DATABASE_MEMORY_MIB: field"),
        ("TACIT_ONLINE_WINDOW_S", "-1", "TACIT_ONLINE_WINDOW_S: online"),
        ("TACIT_JSON_LOGS", "sometimes", "TACIT_JSON_LOGS: field 'json_logs'"),
        ("TACIT_RETENTION_S", "[1", r"TACIT_RETENTION_S: .\[1. is not a value"),
        ("TACIT_LOG_LEVEL", "loud", "log_level: 'loud' is not one of"),
        ("TACIT_HTTP", "nowhere", "http: 'nowhere' is not HOST:PORT"),
        ("TACIT_FORWARD_PROTOCOL", "grpc", "forward_protocol: 'grpc' is not one of"),
        ("TACIT_FORWARD_COMPRESSION", "zstd", "forward_compression: 'zstd' is not one of"),
    ],
)
def test_a_bad_variable_is_refused_naming_it(variable, value, words):
    with pytest.raises(ConfigError, match=words):
        load_config(None, {variable: value})


def test_check_config_reads_what_a_start_would_and_starts_nothing(tmp_path):
    shop_callgraph().save(tmp_path / "cg.yaml")
    (tmp_path / "token").write_text("s3cret\n")
    good = run_here(
        "serve", "--callgraph", "cg.yaml", "--http", "127.0.0.1:1", "--check-config", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert good.returncode == 0, good.stderr
    summary = json.loads(good.stdout)
    assert summary["callgraph"] == "cg.yaml" and summary["endpoints"] > 0
    assert summary["http"] == "127.0.0.1:1" and summary["log_level"] == "info"
    assert not (tmp_path / "tacit.duckdb").exists()  # no store opened
    (tmp_path / "two").write_text("two words\n")
    for args, words in [
        (["--callgraph", "absent.yaml"], "absent.yaml: no such call graph file"),
        (["--config", "absent.yaml"], "absent.yaml"),
        (["--tls-cert-file", "token", "--tls-key-file", "token"], "token"),
        (["--log-level", "loud"], "log_level: 'loud' is not one of"),
    ]:
        bad = run_here("serve", *args, "--check-config", cwd=tmp_path)
        assert one_error_line(bad, words), (args, bad.stderr)
    text = run_here("serve", "--check-config", cwd=tmp_path)
    assert text.returncode == 0 and "callgraph: learned from the spans" in text.stdout


def test_the_log_level_sets_what_the_log_says(capsys):
    log = logging.getLogger("tacit.serve")
    try:
        configure_logging(False, "warning")
        log.info("routine")
        log.warning("unusual")
        configure_logging(True, "debug")
        log.debug("detail")
    finally:
        configure_logging(False)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "unusual" in lines[0]
    assert json.loads(lines[1])["level"] == "debug"


def test_a_missing_extra_is_named_in_one_line(tmp_path, monkeypatch):
    from tacit import extras

    monkeypatch.setattr(extras, "_importable", lambda module: module != "prometheus_client")
    done = run_here("serve", "--check-config", cwd=tmp_path)
    assert one_error_line(
        done, "pip install 'tacit-traces[serve]' (not installed: prometheus_client)"
    )


def test_version(tmp_path: Path):
    from importlib.metadata import version

    done = run_here("--version", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == f"tacit {version('tacit-traces')}\n"


def test_settings_that_go_together_may_come_from_the_file_and_the_command_line(tmp_path):
    """A file naming the log of a role the command line chooses, a role chosen by a variable:
    checked once every layer is in, as a start would take them."""
    (tmp_path / "serve.yaml").write_text("nats: nats://127.0.0.1:4222\nnats_stream: shop\n")
    cfg = load_config(tmp_path / "serve.yaml", {}, {"role": "ingest", "http": None})
    assert (cfg.role, cfg.nats, cfg.nats_stream) == ("ingest", "nats://127.0.0.1:4222", "shop")
    cfg = load_config(tmp_path / "serve.yaml", {"TACIT_ROLE": "reconstruct"})
    assert cfg.role == "reconstruct"
    with pytest.raises(ConfigError, match="nats goes with role ingest or reconstruct"):
        load_config(tmp_path / "serve.yaml", {})
    (tmp_path / "pirate.yaml").write_text("pirate_epoch_s: 2\npirate_pcap: a.pcap\n")
    cfg = load_config(tmp_path / "pirate.yaml", {}, {"pirate_epoch_ns": 10**8})
    assert cfg.pirate.epoch_ns == 10**8 and cfg.pirate_pcap == tmp_path / "a.pcap"
    checked = run_here(
        "serve", "--config", "serve.yaml", "--role", "ingest", "--check-config", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["role"] == "ingest"

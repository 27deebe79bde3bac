"""TLS on both listeners: with a certificate and its key, OTLP/HTTP and the query API answer
over HTTPS only and OTLP/gRPC over TLS only, to clients that trust the certificate; files that
are missing, unpaired or not PEM are one-line errors naming them."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from clirun import one_error_line, run_here
from serve_app import config, running, shop_spans
from tacit.errors import ConfigError
from tacit.experiment.otlp_load import sdk_spans
from tacit.experiment.quic import self_signed
from tacit.serve import Service


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"), "127.0.0.1")


def test_both_listeners_speak_tls_only(tmp_path, pem) -> None:
    cert_file, key_file = pem
    request = encode_spans(sdk_spans(shop_spans(1).take(np.arange(64)), 0))
    trusting = ssl.create_default_context(cafile=str(cert_file))
    with running(tmp_path, tls_cert_file=cert_file, tls_key_file=key_file) as svc:
        base = f"127.0.0.1:{svc.http_port}"
        with urllib.request.urlopen(f"https://{base}/readyz", context=trusting, timeout=10) as r:
            assert r.status == 200
        post = urllib.request.Request(
            f"https://{base}/v1/traces",
            data=request.SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
        )
        with urllib.request.urlopen(post, context=trusting, timeout=10) as r:
            assert r.status == 200
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(f"https://{base}/readyz", timeout=10)  # not trusted
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://{base}/readyz", timeout=10)  # not TLS

        target = f"127.0.0.1:{svc.grpc_port}"
        credentials = grpc.ssl_channel_credentials(root_certificates=cert_file.read_bytes())
        with grpc.secure_channel(target, credentials) as channel:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=10)
        with grpc.insecure_channel(target) as channel, pytest.raises(grpc.RpcError) as refused:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        svc.store.settle()  # the journal into the ingest table
        stored = svc.store._cursor().execute("SELECT sum(spans) FROM ingest").fetchone()[0]
    assert stored == 2 * 64  # one export over HTTPS, one over gRPC with TLS


def test_tls_files_go_together_and_must_pair(tmp_path, pem) -> None:
    cert_file, key_file = pem
    (tmp_path / "other").mkdir()
    _, other_key = self_signed(tmp_path / "other", "127.0.0.1")
    with pytest.raises(ConfigError, match="give both or neither"):
        config(tmp_path, tls_cert_file=cert_file)
    with pytest.raises(ConfigError, match=f"{cert_file} and {other_key} are not a PEM"):
        Service(config(tmp_path, tls_cert_file=cert_file, tls_key_file=other_key), None)
    with pytest.raises(ConfigError, match=f"tls_key_file: cannot read {tmp_path / 'none.key'}"):
        Service(config(tmp_path, tls_cert_file=cert_file, tls_key_file=tmp_path / "none.key"), None)
    (tmp_path / "cg.json").write_text("{}")
    run = run_here("serve", "--callgraph", "cg.json", "--tls-key-file", str(key_file), cwd=tmp_path)
    one_error_line(run, "tls_cert_file and tls_key_file go together")

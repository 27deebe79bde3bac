"""Request bodies in every content encoding the exporters send, compressed by the reference
libraries (zlib, libzstd, snappy's Rust port), inflated exactly; bombs, cut and padded bodies
and mislabelled ones refused within the bound; an unknown encoding 415 naming those taken."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from content_codings import COMPRESS
from serve_app import get_json, post, running, shop_spans
from tacit.errors import InputError
from tacit.experiment.otlp_load import sdk_spans
from tacit.reconstruct.online import NS, OnlineParams
from tacit.serve.content_encoding import UnsupportedEncoding, decode_body

LIMIT = 1 << 20


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


@pytest.mark.parametrize("encoding", COMPRESS)
def test_each_encoding_inflates_exactly(encoding):
    data = np.random.default_rng(1).integers(0, 4, 300_000, dtype=np.uint8).tobytes()
    assert decode_body(COMPRESS[encoding](data), encoding.upper(), LIMIT) == data
    assert decode_body(COMPRESS[encoding](b""), encoding, LIMIT) == b""


def test_raw_deflate_and_framed_snappy_under_snappy_are_taken_as_senders_send_them():
    data = b"span " * 1000
    assert decode_body(_raw_deflate(data), "deflate", LIMIT) == data
    assert decode_body(COMPRESS["x-snappy-framed"](data), "snappy", LIMIT) == data
    assert decode_body(data, None, LIMIT) == decode_body(data, "identity", LIMIT) == data


@pytest.mark.parametrize("encoding", COMPRESS)
def test_a_bomb_is_refused_at_the_bound(encoding):
    bomb = COMPRESS[encoding](b"\0" * (64 * LIMIT))
    assert len(bomb) < 4 * LIMIT
    with pytest.raises(InputError, match=f"inflates beyond {LIMIT:,} bytes"):
        decode_body(bomb, encoding, LIMIT)


@pytest.mark.parametrize("encoding", COMPRESS)
def test_a_body_cut_short_padded_or_not_of_its_encoding_is_refused(encoding):
    data = np.random.default_rng(2).integers(0, 255, 50_000, dtype=np.uint8).tobytes()
    body = COMPRESS[encoding](data)
    for bad in (body[: len(body) // 2], body + b"junk", data):
        with pytest.raises(InputError):
            decode_body(bad, encoding, LIMIT)


def test_an_unknown_encoding_is_unsupported():
    with pytest.raises(UnsupportedEncoding, match="'br' is not taken: gzip, deflate, zstd"):
        decode_body(b"x", "br", LIMIT)


def test_the_service_takes_every_encoding_and_answers_415_to_others(tmp_path):
    spans = shop_spans(1)
    body = encode_spans(sdk_spans(spans.take(np.arange(100)), 0)).SerializeToString()
    slow = OnlineParams(window_ns=60 * NS, lookahead_ns=60 * NS, max_request_ns=60 * NS)
    with running(tmp_path, online=slow) as svc:
        taken = [
            post(svc, compress(body), "application/x-protobuf", **{"Content-Encoding": name})[0]
            for name, compress in COMPRESS.items()
        ]
        status, answer, headers = post(
            svc, body, "application/x-protobuf", **{"Content-Encoding": "br"}
        )
        received = get_json(svc, "/api/tacit/status")["received"]
    assert taken == [200] * len(COMPRESS)
    assert received == 100 * len(COMPRESS)
    assert status == 415 and "gzip" in headers["Accept-Encoding"]
    assert "'br' is not taken" in status_pb2.Status.FromString(answer).message

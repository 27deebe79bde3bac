"""The tokens of ``tacit serve`` as ``Authorization`` headers carry them (RFC 6750 bearer
tokens, RFC 7617 Basic), without a running service."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from tacit.serve.auth import authorized, may_read

TOKEN = "s3cret-token"


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("Bearer s3cret-token", True),
        ("bearer s3cret-token", True),  # the scheme's name in any case (RFC 9110 §11.1)
        ("BEARER  s3cret-token ", True),
        ("Bearer wrong", False),
        ("Bearer", False),
        ("Bearers3cret-token", False),
        ("Token s3cret-token", False),
        ("", False),
        (None, False),
    ],
)
def test_a_bearer_token_is_taken_in_any_case_of_its_scheme(header, ok):
    assert authorized(header, TOKEN) is ok
    assert authorized(header, None)  # no token to carry: any header


@pytest.mark.parametrize("scheme", ["Basic", "basic", "BASIC"])
def test_a_reader_may_give_the_token_as_a_basic_password(scheme):
    pair = base64.b64encode(f"grafana:{TOKEN}".encode()).decode()
    assert may_read(f"{scheme} {pair}", TOKEN)
    assert not may_read(f"{scheme} {base64.b64encode(b'grafana:no').decode()}", TOKEN)
    assert not may_read(f"{scheme} not-base64!", TOKEN)


def test_listeners_beyond_loopback_without_tokens_are_named():
    from tacit.serve.config import ServeConfig
    from tacit.serve.service import open_to_others

    assert open_to_others(ServeConfig()) == []  # the defaults: loopback only
    assert open_to_others(ServeConfig(http="[::1]:4318", grpc="localhost:4317")) == []
    wide = open_to_others(ServeConfig(http="0.0.0.0:4318", grpc="10.0.0.5:4317"))
    assert wide == [
        "http 0.0.0.0:4318, grpc 10.0.0.5:4317 take spans from anyone (no ingest_token_file)",
        "http 0.0.0.0:4318 answers queries to anyone (no query_token_file)",
    ]
    guarded = ServeConfig(
        http="0.0.0.0:4318",
        grpc="",
        ingest_token_file=Path("ingest"),
        query_token_file=Path("query"),
    )
    assert open_to_others(guarded) == []
    assert open_to_others(ServeConfig(http="collector.local:4318", grpc="")) != []

"""The server end and target of an RPC as each side's span names it, under the old and the
stable HTTP semantic conventions (what the requests and WSGI instrumentations write)."""

from __future__ import annotations

import pytest

from tacit.formats.rpc_endpoints import rpc_endpoint, rpc_target, same_target
from tacit.model.spans import CLIENT, INTERNAL, SERVER

OLD_CLIENT = {"http.method": "GET", "http.url": "http://127.0.0.1:5001/near?lat=1"}
OLD_SERVER = {
    "net.host.name": "127.0.0.1:5001",  # the WSGI instrumentation writes the Host header here
    "net.host.port": 5001,
    "http.host": "127.0.0.1:5001",
    "http.target": "/near?lat=1",
    "net.peer.port": 40212,
}
NEW_CLIENT = {"url.full": "https://Search.svc/x?q=2", "server.address": "search.svc"}
NEW_SERVER = {
    "server.address": "search.svc",
    "server.port": 443,
    "url.path": "/x",
    "url.query": "q=2",
}


@pytest.mark.parametrize(("client", "server"), [(OLD_CLIENT, OLD_SERVER), (NEW_CLIENT, NEW_SERVER)])
def test_both_sides_of_one_request_name_the_same_end_and_target(client, server):
    assert rpc_endpoint(CLIENT, client) == rpc_endpoint(SERVER, server) is not None
    assert rpc_target(CLIENT, client) == rpc_target(SERVER, server) is not None


def test_what_names_no_end_gives_none():
    assert rpc_endpoint(CLIENT, {"http.url": "http://host:notaport/"}) is None
    assert rpc_endpoint(SERVER, {"server.address": "::1"}) is None  # no port
    assert rpc_endpoint(INTERNAL, OLD_SERVER) is None
    assert rpc_endpoint(SERVER, {"http.host": "[::1]:8080"}) == "::1:8080"
    assert rpc_endpoint(CLIENT, {"net.peer.name": "db", "net.peer.port": "5432"}) == "db:5432"


def test_a_producer_and_its_consumer_name_one_queue_and_message():
    sent = {
        "messaging.system": "kafka",
        "messaging.destination.name": "visits",
        "messaging.message.id": "m-7",
    }
    taken = {**sent, "messaging.operation.type": "process"}
    assert rpc_endpoint(CLIENT, sent) == rpc_endpoint(SERVER, taken) == "queue kafka/visits"
    assert rpc_target(CLIENT, sent) == rpc_target(SERVER, taken) == "m-7"


def test_targets_agree_on_the_path_and_on_the_query_where_both_name_one():
    assert same_target("/cart/0?v=1", "/cart/0")  # an eBPF agent's server path, no query
    assert same_target("/cart/0?v=1", "/cart/0?v=1") and same_target(None, "/x")
    assert not same_target("/cart/0?v=1", "/cart/0?v=2")
    assert not same_target("/cart/0", "/cart/1")

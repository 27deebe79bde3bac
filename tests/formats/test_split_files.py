"""Several files are one set of spans (:func:`tacit.formats.span_join.join_inputs`): parents and
RPC pairs across files, spans in two files read once, in every format and through each reader;
Zipkin's shared spans with their sides in two files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from split_exports import FORMATS, REQUESTS, SERVICES, sdk_spans, write_exports
from tacit.errors import InputError
from tacit.evaluation.reconstruction import evaluate
from tacit.formats import observe, read_jaeger, read_otlp, read_spans, read_zipkin
from tacit.formats.span_files import DUPLICATE_SPANS
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable

TRACE = "5b8aa5a2d2c872e8321cf37308d69df2"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return write_exports(sdk_spans(), tmp_path_factory.mktemp("split"))


def links(spans: SpanTable) -> set[tuple]:
    """Each span by its ids, with its kind, service, peer, and its parent's and RPC partner's
    span ids: what the tables must agree on, whatever the order of their rows."""

    def sid(row: int) -> str | None:
        return None if row == NONE else spans.name("span_id", row)

    return {
        (
            spans.name("trace", r),
            sid(r),
            int(spans.kind[r]),
            spans.name("service", r),
            spans.name("peer", r),
            sid(int(spans.parent[r])),
            sid(int(spans.link[r])),
        )
        for r in range(len(spans))
    }


@pytest.mark.parametrize("fmt", FORMATS)
def test_per_service_files_read_as_the_one_file(made, fmt: str) -> None:
    files = made[fmt]
    one, split = read_spans(files["all"]), read_spans(files["split"])
    assert links(split) == links(one)
    assert (split.parent != NONE).sum() == 6 * REQUESTS  # every span but the roots
    assert links(read_spans(files["split"][0].parent)) == links(one)  # their directory


@pytest.mark.parametrize("fmt", FORMATS)
def test_rpcs_are_paired_across_files(made, fmt: str) -> None:
    files = made[fmt]
    one, _ = observe([files["all"]])
    split, _ = observe(files["split"])
    assert links(split.spans) == links(one.spans)
    assert split.accounting == one.accounting
    calls = split.spans.kind == CLIENT
    # every call but those to redis reaches the callee's server span, in the callee's file
    assert (split.spans.link[calls] != NONE).sum() == 2 * REQUESTS
    peers = {split.spans.strings[c] for c in split.spans.peer[calls].tolist()}
    assert peers == {"stock", "price", None}


@pytest.mark.parametrize(
    ("fmt", "reader"), [("otlp-pb", read_otlp), ("jaeger", read_jaeger), ("zipkin", read_zipkin)]
)
def test_each_format_reader_joins_its_files(made, fmt: str, reader) -> None:
    files = made[fmt]
    assert links(reader(files["split"])) == links(reader(files["all"]))
    assert links(read_spans(files["split"], fmt.split("-")[0])) == links(reader(files["all"]))


def test_a_span_in_two_files_is_read_once_and_counted(made, tmp_path: Path) -> None:
    files = made["otlp-pb"]
    again = tmp_path / "again.pb"
    shutil.copy(files["split"][1], again)  # stock's export, written twice
    one, _ = observe([files["all"]])
    both, _ = observe([*files["split"], again])
    assert links(both.spans) == links(one.spans)
    assert both.accounting == {**one.accounting, DUPLICATE_SPANS: 2 * REQUESTS}
    # the same spans in another format are the same spans
    mixed, _ = observe([files["all"], made["jaeger"]["all"], made["zipkin"]["split"][0]])
    assert links(mixed.spans) == links(one.spans)
    assert mixed.accounting[DUPLICATE_SPANS] == 7 * REQUESTS + 4 * REQUESTS


def test_evaluation_of_per_service_files_is_that_of_the_one_file(made) -> None:
    files = made["otlp-jsonl"]
    one = evaluate([files["all"]], ["traceweaver", "fcfs"]).as_dict()
    split = evaluate(files["split"], ["traceweaver", "fcfs"]).as_dict()
    for result in (*one["results"], *split["results"]):
        result.pop("seconds"), result.pop("spans_per_second")
    assert split == one
    assert one["spans"] == 6 * REQUESTS and one["traces"] == REQUESTS
    assert [r["accuracy"] for r in one["results"]] == [1.0, 1.0]


def zipkin_span(span_id: str, kind: str | None, service: str, parent: str | None, **more) -> dict:
    span = {
        "traceId": TRACE,
        "id": span_id,
        "name": f"{service} op",
        "timestamp": 1_700_000_000_000_000 + 10 * len(span_id),
        "duration": 100,
        "localEndpoint": {"serviceName": service},
        **more,
    }
    if kind is not None:
        span["kind"] = kind
    if parent is not None:
        span["parentId"] = parent
    return span


@pytest.mark.parametrize("flagged", [True, False])
def test_a_zipkin_shared_span_with_a_side_in_each_file(tmp_path: Path, flagged: bool) -> None:
    """Brave writes the server side of an RPC under the client's id, with ``shared: true``
    (older instrumentation without the flag): the server's file has that side and the server's
    work under it, the client's file the client side."""
    front = [
        zipkin_span("a1", "SERVER", "front", None),
        zipkin_span("b2", "CLIENT", "front", "a1"),
    ]
    shared = {"shared": True} if flagged else {}
    cart = [
        zipkin_span("b2", "SERVER", "cart", "a1", **shared),
        zipkin_span("c3", "CLIENT", "cart", "b2", tags={"peer.service": "redis"}),
    ]
    for name, spans in (("front", front), ("cart", cart), ("one", front + cart)):
        (tmp_path / f"{name}.json").write_text(json.dumps(spans))
    one = read_spans(tmp_path / "one.json")
    split = read_spans([tmp_path / "front.json", tmp_path / "cart.json"])
    assert links(split) == links(one)
    server = next(r for r in range(len(split)) if split.name("span_id", r) == "b2:server")
    assert split.kind[server] == SERVER and split.name("span_id", int(split.parent[server])) == "b2"
    detail = split.detail(server)
    assert detail is not None and detail.span_id == "b2:server"
    observed, _ = observe([tmp_path / "front.json", tmp_path / "cart.json"])
    assert observed.accounting["client_synthesized"] == 0


def test_different_spans_with_one_id_in_two_files_are_refused(made, tmp_path: Path) -> None:
    doc = json.loads(made["zipkin"]["split"][2].read_text())  # price's
    doc[1]["parentId"] = doc[0]["id"]
    (tmp_path / "price.json").write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        read_spans([made["zipkin"]["all"], tmp_path / "price.json"])
    text = str(e.value)
    assert text.startswith(f"{tmp_path / 'price.json'}: record 2: span id {doc[1]['id']} ")
    assert str(made["zipkin"]["all"]) in text and "parent" in text


def test_a_cycle_through_two_files_is_refused_naming_a_file(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([zipkin_span("a1", "SERVER", "a", "b2")]))
    (tmp_path / "b.json").write_text(json.dumps([zipkin_span("b2", "CLIENT", "b", "a1")]))
    with pytest.raises(InputError, match=r"\.json: record 1: trace .*cycle"):
        read_spans([tmp_path / "a.json", tmp_path / "b.json"])


def test_one_file_is_read_as_before(made) -> None:
    """One file is its reader's table as it is, without a join's copy of its columns."""
    spans = read_spans(made["otlp-pb"]["all"])
    assert spans.sources == [str(made["otlp-pb"]["all"])]
    assert np.array_equal(spans.record, np.arange(1, 7 * REQUESTS + 1))
    assert {spans.name("service", r) for r in range(len(spans))} == set(SERVICES)

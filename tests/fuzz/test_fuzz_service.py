"""``tacit serve`` on malformed and hostile requests (:mod:`service_cases`): every answer is one
a bad request may get, in time, and the service stays ready. The cases found so far first,
then drawn ones (``python bench/bench_fuzz_service.py`` draws many more)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from service_cases import cases, known, ready, run_case, valid_bodies

from serve_app import running


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory):
    with running(tmp_path_factory.mktemp("serve")) as svc:
        yield svc


@pytest.mark.parametrize("case", known(), ids=lambda c: c.name or c.path[:40])
def test_a_known_hostile_request_is_answered_as_a_bad_one(service, case) -> None:
    assert run_case(case, service.http_port, service.grpc_port) is None
    assert ready(service.http_port) is None


PROTOBUF, JSON = valid_bodies()


@settings(max_examples=40, derandomize=True, deadline=None, database=None)
@given(case=cases(PROTOBUF, JSON))
def test_a_drawn_request_is_answered_as_a_bad_one_or_taken(service, case) -> None:
    assert run_case(case, service.http_port, service.grpc_port) is None, case.show()
    assert ready(service.http_port) is None, case.show()

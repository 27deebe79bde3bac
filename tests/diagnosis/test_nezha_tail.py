"""The slowest requests around a fault injected in the Nezha OnlineBoutique data.

Nezha (2022-08-22) injected CPU contention into the shippingservice pod at 07:26:48 (its
``fault_list.json``); the minutes 07:26–07:28 are in ../shared. The profile of the slowest
requests in the minute after the injection is compared with the one before it, from the
ground-truth traces.
"""

from __future__ import annotations

import pytest
from nezha_faults import nezha_fault

from tacit.diagnosis.tail import TailParams, requests_between, tail_profile


@pytest.fixture(scope="module")
def shipping_fault(shared_data):
    minutes = ["07_26", "07_27", "07_28"]
    fault, spans = nezha_fault(shared_data, "2022-08-22 07:26:48", minutes)
    at = int(fault["inject_timestamp"]) * 10**9
    before = requests_between(spans, 0, at)
    during = requests_between(spans, at, at + 60 * 10**9)
    return fault["inject_pod"].split("-")[0], before, during


@pytest.mark.realdata
@pytest.mark.parametrize("percent", [2, 5])
def test_the_faulty_service_stands_out_in_the_slowest_requests_after_the_fault(
    shipping_fault, percent
):
    service, before, during = shipping_fault
    assert service == "shippingservice"
    params = TailParams(percent=percent)
    ratio_before = tail_profile(before, params).profile[service]["median_ratio"]
    after = tail_profile(during, params)
    assert after.profile[service]["median_ratio"] > 1.5 * ratio_before
    assert service not in tail_profile(before, params).culprits


@pytest.mark.realdata
def test_the_faulty_service_is_named_only_after_the_fault(shipping_fault):
    service, before, during = shipping_fault
    params = TailParams(percent=5)
    assert service in tail_profile(during, params).culprits
    assert service not in tail_profile(before, params).culprits

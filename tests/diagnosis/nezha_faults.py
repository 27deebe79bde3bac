"""The Nezha OnlineBoutique day in ../shared (2022-08-22): a fault its ``fault_list.json``
names, with the spans of the minutes around it."""

from __future__ import annotations

import json
from pathlib import Path

from tacit.formats import observe
from tacit.model.spans import SpanTable

DAY = "nezha/online_boutique/2022-08-22"


def nezha_fault(shared_data: Path, inject_time: str, minutes: list[str]) -> tuple[dict, SpanTable]:
    """The fault injected at ``inject_time`` (as the list writes it) and the observed spans of
    the minute files ``HH_MM`` in ``minutes``."""
    day = shared_data / DAY
    hours = json.loads((day / "fault_list.json").read_text()).values()
    (fault,) = [f for hour in hours for f in hour if f["inject_time"] == inject_time]
    spans = observe([day / f"{m}_trace.csv.gz" for m in minutes])[0].spans
    return fault, spans

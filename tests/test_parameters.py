"""One convention for the algorithms' parameters: the defaults are tacit's, ``published()``
the paper's, and docs/parameters.md's table lists exactly the settings in which they differ,
with both values."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

TABLE = Path(__file__).resolve().parents[1] / "docs" / "parameters.md"
CLASSES = (
    "tacit.reconstruct.TraceWeaverParams",
    "tacit.response_latency.PirateParams",
    "tacit.oneway_latency.RDAParams",
    "tacit.causal_paths.LinkParams",
)


def _class(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _documented() -> dict[str, dict[str, tuple[str, str]]]:
    """Per class, per setting: the table's default and published values, as written."""
    rows: dict[str, dict[str, tuple[str, str]]] = {c: {} for c in CLASSES}
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`tacit."):
            cls, setting, default, published = (re.sub("`", "", c) for c in cells[:4])
            rows[cls][setting] = (default, published)
    return rows


@pytest.mark.parametrize("path", CLASSES)
def test_the_table_gives_every_difference_from_the_paper(path):
    cls = _class(path)
    tacit, paper = cls(), cls.published()
    differ = {
        f.name: (repr(getattr(tacit, f.name)), repr(getattr(paper, f.name)))
        for f in dataclasses.fields(cls)
        if getattr(tacit, f.name) != getattr(paper, f.name)
    }
    assert differ == _documented()[path]


def test_published_takes_overrides():
    from tacit.oneway_latency import RDAParams
    from tacit.reconstruct import TraceWeaverParams

    assert RDAParams.published(seed=4).k == 2 and RDAParams.published(seed=4).seed == 4
    assert TraceWeaverParams.published(joins=True).joins


def test_the_published_traceweaver_reconstructs_a_simulated_app():
    """The paper's algorithm, every extension off, runs end to end and maps a light load of
    the simulated app (which none of the extensions is needed for) as tacit's does."""
    from tacit.evaluation.reconstruction import evaluate
    from tacit.reconstruct import TraceWeaverParams
    from tacit.simulate import load_app, simulate

    spans = simulate(load_app(None), 100, n_requests=200, seed=3)
    paper = evaluate(spans, ("traceweaver",), params=TraceWeaverParams.published())
    tacit = evaluate(spans, ("traceweaver",))
    assert paper.results[0]["link_accuracy"] == tacit.results[0]["link_accuracy"] > 0.95

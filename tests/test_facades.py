"""Every package's public facade: ``__all__`` names what it exports, and every name resolves."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = (
    "model",
    "formats",
    "simulate",
    "reconstruct",
    "causal_paths",
    "response_latency",
    "oneway_latency",
    "diagnosis",
    "evaluation",
    "experiment",
)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name):
    package = importlib.import_module(f"tacit.{name}")
    exported = package.__all__
    assert exported and len(set(exported)) == len(exported)
    for attr in exported:
        assert getattr(package, attr) is not None, attr
    assert set(exported) <= set(dir(package))


def test_a_lazy_facade_refuses_unknown_names():
    experiment = importlib.import_module("tacit.experiment")
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        experiment.nothing  # noqa: B018

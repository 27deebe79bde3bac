"""Every package's public facade: ``__all__`` names what it exports, every name resolves, and
names are imported on first use, so that the command line imports only what a command runs."""

from __future__ import annotations

import importlib
import subprocess
import sys

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
    "serve",
)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name):
    package = importlib.import_module(f"tacit.{name}")
    exported = package.__all__
    assert exported and len(set(exported)) == len(exported)
    for attr in exported:
        assert getattr(package, attr) is not None, attr
    assert set(exported) <= set(dir(package))


@pytest.mark.parametrize("name", PACKAGES)
def test_a_facade_refuses_unknown_names(name):
    package = importlib.import_module(f"tacit.{name}")
    with pytest.raises(AttributeError, match="nothing"):
        package.nothing  # noqa: B018


def test_a_function_named_as_its_module_stays_the_function():
    """``tacit.reconstruct.assemble`` is the function, even once its module is imported."""
    reconstruct = importlib.import_module("tacit.reconstruct")
    importlib.import_module("tacit.reconstruct.assemble")
    assert callable(reconstruct.assemble)
    from tacit.reconstruct import assemble

    assert callable(assemble)


def test_the_command_line_imports_no_algorithm_before_a_command_runs():
    """Registering every command imports neither numba, SciPy nor any algorithm's module: a
    command that stops at its options, or one that reads a file, pays for what it runs. (The
    format names, a module of names that imports nothing, are what the help lists.)"""
    code = (
        "import sys, tacit.cli.main; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'scipy') "
        "or m.startswith(('tacit.reconstruct.', 'tacit.model.', 'tacit.formats.', "
        "'tacit.diagnosis.', 'tacit.response_latency.', 'tacit.oneway_latency.')) "
        "and m != 'tacit.formats.format_names'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

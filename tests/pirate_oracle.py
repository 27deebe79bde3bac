"""Pirate's live runs judged against the per-epoch median oracle of the same run (one estimate
per epoch, the true median): its per-response error is the floor of any one-estimate-per-epoch
method, and it moves with the machine's load as Pirate's does. Used by the memcached and QUIC
tests, whose docstrings give the measurements behind the bounds."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tacit.experiment.asymmetric import AsymmetricResult

ERROR_RATIO = 1.75
"""Pirate's median |error| per response stays below this many times the oracle's, and its
median signed error below the oracle's |error|."""


def misses(
    run: AsymmetricResult, estimators: Sequence[str]
) -> list[tuple[str, float, float, float]]:
    """The estimators of ``run`` outside the bounds, each with its median |error|, its median
    signed error and the oracle's median |error|."""
    floor = run.oracle["median"].median_relative_error
    out = []
    for name in estimators:
        error, bias = run.pirate[name].median_relative_error, run.pirate[name].median_signed_error
        if not (error < ERROR_RATIO * floor and abs(bias) < floor):
            out.append((name, error, bias, floor))
    return out


def check_follows(
    run: AsymmetricResult, estimators: Sequence[str], again: Callable[[], AsymmetricResult]
) -> None:
    """The estimators follow the clients in ``run``; a short run now and then misses by far
    (on memcached: epochs whose latencies spread by more than Pirate's modes can take for one
    phenomenon, see the memcached test), so one that misses is followed by ``again()``, a run
    with another seed, and the check fails when that one misses too."""
    missed = misses(run, estimators)
    if missed:
        second = again()
        assert not misses(second, estimators), (missed, misses(second, estimators))

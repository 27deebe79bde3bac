"""Pirate on a live interface: the run's duration is checked before anything is captured."""

from __future__ import annotations

import pytest

from tacit.errors import ConfigError
from tacit.response_latency import PirateParams
from tacit.response_latency.live import estimate_live


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), 0.0, -1.0])
def test_a_live_run_needs_a_positive_finite_duration(seconds):
    with pytest.raises(ConfigError, match="positive, finite duration"):
        estimate_live("lo", "", seconds, PirateParams())

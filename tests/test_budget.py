"""The memory budget: read from the environment or the system, checked before allocations."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.budget import ENV, check_allocation, memory_budget
from tacit.errors import ConfigError, InputError


@pytest.mark.parametrize(
    ("text", "size"), [("8G", 8 << 30), ("512m", 512 << 20), ("1.5K", 1536), ("4096", 4096)]
)
def test_the_budget_is_read_from_the_environment(monkeypatch, text, size):
    monkeypatch.setenv(ENV, text)
    assert memory_budget() == size


@pytest.mark.parametrize("text", ["0", "-1G", "lots", "nanG", "infT"])
def test_a_bad_budget_is_refused_naming_the_variable(monkeypatch, text):
    monkeypatch.setenv(ENV, text)
    with pytest.raises(ConfigError, match=ENV):
        memory_budget()


def test_without_a_setting_the_budget_is_the_memory_available(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with open("/proc/meminfo") as f:
        available = next(int(x.split()[1]) * 1024 for x in f if x.startswith("MemAvailable:"))
    assert memory_budget() == pytest.approx(available, rel=0.2)  # memory moves meanwhile


def test_an_allocation_over_the_budget_names_its_inputs(monkeypatch):
    monkeypatch.setenv(ENV, "1M")
    check_allocation((1024, 128), np.float64, "fits exactly", ["a.json"])
    with pytest.raises(InputError) as e:
        check_allocation((1024, 129), np.float64, "one column more", ["a.json", "b.json"])
    assert str(e.value).startswith("a.json, b.json: one column more would need 1.0 MiB")

"""The traced app's live run, shared by the tests of the app itself and of the capture path
from its packets: one run of 5 s instead of one for each (about 8 s less of the live tests)."""

from __future__ import annotations

import pytest

from tacit.experiment.traced_app import (
    TracedAppParams,
    TracedAppResult,
    run_traced_app,
    traced_app_unavailable,
)


@pytest.fixture(scope="session")
def traced_app_params() -> TracedAppParams:
    return TracedAppParams(duration_s=5.0, subnet=83)


@pytest.fixture(scope="session")
def traced_app_run(
    traced_app_params: TracedAppParams, tmp_path_factory: pytest.TempPathFactory
) -> TracedAppResult:
    reason = traced_app_unavailable()
    if reason:
        pytest.skip(f"traced app unavailable: {reason}")
    return run_traced_app(traced_app_params, tmp_path_factory.mktemp("traced-app"))

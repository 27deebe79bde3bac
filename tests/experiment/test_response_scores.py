"""The experiment scores beyond the estimator's: req-to-req and the per-epoch oracles, on a
hand-made client log."""

from __future__ import annotations

import numpy as np
import pytest

from tacit.errors import ConfigError
from tacit.experiment.response_scores import epoch_oracle_errors, req_to_req_errors
from tacit.experiment.web_clients import ResponseLog
from tacit.model.columns import StringPool

MS = 1_000_000


def log(sent, received, port=None) -> ResponseLog:
    n = len(sent)
    port = np.full(n, 40_000) if port is None else np.asarray(port)
    return ResponseLog(
        StringPool(["get x"]),
        conn=np.zeros(n, np.int32),
        port=port.astype(np.uint16),
        target=np.zeros(n, np.int32),
        sent=np.asarray(sent, np.int64),
        received=np.asarray(received, np.int64),
        parent=np.full(n, -1, np.int64),
        outstanding=np.ones(n, np.int16),
        size=np.full(n, 100, np.int64),
    )


def test_req_to_req_is_the_gap_to_the_request_a_response_let_go():
    # One request at a time: each sent 0.1 ms after the previous response was read.
    sent = [0, 10 * MS + 100_000, 30 * MS + 200_000]
    received = [10 * MS, 30 * MS + 100_000, 35 * MS]
    s = req_to_req_errors(log(sent, received))
    assert s.samples == 2 and s.unmatched_requests == 1  # the last triggered nothing
    assert np.allclose(np.sort(s.signed_errors), [100_000 / (20 * MS), 100_000 / (10 * MS)])


def test_epoch_oracles():
    # Three responses completing in one 100 ms epoch: latencies 10, 20 and 60 ms.
    sent = [0, 0, 0]
    received = [10 * MS, 20 * MS, 60 * MS]
    mean = epoch_oracle_errors(log(sent, received), 100 * MS, "mean")
    median = epoch_oracle_errors(log(sent, received), 100 * MS, "median")
    assert np.allclose(
        np.sort(mean.signed_errors), np.sort([30 / 10 - 1, 30 / 20 - 1, 30 / 60 - 1])
    )
    assert median.median_signed_error == 0 and median.samples == 3
    with pytest.raises(ConfigError):
        epoch_oracle_errors(log(sent, received), 100 * MS, "mode")

"""Syslog messages to templates (Drain3), and time-windowed counts per (device, template).

YTrace (Kanuparthy et al., arXiv 1602.03273, §4) mines causality between *templates* of
device syslog messages, counted in time windows; the paper builds on Log-Prophet (Zhou et al.,
arXiv 1605.06150, §3), which groups messages into templates first. The template miner here is
Drain (He et al., ICWS 2017) as maintained in the ``drain3`` package, with generic masking of
addresses and numbers so that one configuration serves every device type (no per-dataset
regular expressions, unlike the loghub benchmark's tuned settings).

:func:`grouping_accuracy` is loghub's metric (Zhu et al., ICSE-SEIP 2019, §III-C): a message
is parsed correctly when the set of messages in its predicted group equals the set in its true
group exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from drain3 import TemplateMiner
from drain3.masking import MaskingInstruction
from drain3.template_miner_config import TemplateMinerConfig

from tacit.errors import ConfigError

DEFAULT_MASKING: tuple[tuple[str, str], ...] = (
    (r"(?<![\w.:])(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?(?![\w.])", "IP"),
    (r"(?<![\w:])(?:[0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}(?![\w:])", "MAC"),
    (r"(?<![\w])0x[0-9a-fA-F]+(?![\w])", "HEX"),
    (r"(?<![\w.\-])[-+]?\d+(?:\.\d+)?(?![\w.])", "NUM"),
)
"""(regex, name) masks applied before Drain: IPv4 addresses (with port), MAC addresses, hex
literals and free-standing numbers. Device-independent; each becomes ``<NAME>``."""


@dataclass(frozen=True)
class TemplateParams:
    """Drain's parameters. ``similarity`` 0.4 and ``depth`` 4 are the defaults of Drain3 (and
    close to Drain's paper, §IV-B); ``extra_delimiters`` split ``key=value`` pairs so that the
    value can vary; ``masking`` is :data:`DEFAULT_MASKING`."""

    similarity: float = 0.4
    depth: int = 4
    max_children: int = 100
    extra_delimiters: tuple[str, ...] = ("=", ",")
    masking: tuple[tuple[str, str], ...] = DEFAULT_MASKING

    def __post_init__(self) -> None:
        if not 0.0 < self.similarity <= 1.0:
            raise ConfigError(f"similarity must be in (0, 1], not {self.similarity}")
        if self.depth < 3:
            raise ConfigError(f"depth must be at least 3, not {self.depth}")


@dataclass
class Templates:
    """Per message, the index of its template (``template``); per template, its text and count."""

    template: np.ndarray
    texts: list[str] = field(default_factory=list)

    @property
    def counts(self) -> np.ndarray:
        return np.bincount(self.template, minlength=len(self.texts))


def template_miner(params: TemplateParams) -> TemplateMiner:
    """A fresh Drain3 miner configured from ``params`` (in memory, no persistence)."""
    cfg = TemplateMinerConfig()
    cfg.drain_sim_th = params.similarity
    cfg.drain_depth = params.depth
    cfg.drain_max_children = params.max_children
    cfg.drain_extra_delimiters = list(params.extra_delimiters)
    cfg.masking_instructions = [MaskingInstruction(rx, name) for rx, name in params.masking]
    cfg.profiling_enabled = False
    return TemplateMiner(config=cfg)


def mine_templates(messages: Sequence[str], params: TemplateParams | None = None) -> Templates:
    """Group ``messages`` into templates with Drain3 (see the module docstring).

    A message keeps the cluster Drain put it in; the template texts are the clusters' final
    templates (Drain generalizes a cluster's template as messages arrive, it never moves a
    message to another cluster).
    """
    miner = template_miner(params or TemplateParams())
    ids = np.fromiter(
        (miner.add_log_message(m)["cluster_id"] for m in messages),
        dtype=np.int64,
        count=len(messages),
    )
    cluster_ids, template = np.unique(ids, return_inverse=True)
    by_id = {c.cluster_id: c.get_template() for c in miner.drain.clusters}
    return Templates(template.astype(np.int32), [by_id[int(c)] for c in cluster_ids])


def grouping_accuracy(predicted: np.ndarray, truth: np.ndarray) -> float:
    """loghub's grouping accuracy: the share of messages whose predicted group holds exactly
    the messages of their true group (both arguments: one group label per message)."""
    predicted, truth = np.asarray(predicted), np.asarray(truth)
    if len(predicted) != len(truth):
        raise ValueError("predicted and true groups differ in length")
    if not len(truth):
        return float("nan")
    _, p = np.unique(predicted, return_inverse=True)
    _, t = np.unique(truth, return_inverse=True)
    pairs, pair_n = np.unique(np.stack([p, t]), axis=1, return_counts=True)
    p_n = np.bincount(p)
    t_n = np.bincount(t)
    exact = (pair_n == p_n[pairs[0]]) & (pair_n == t_n[pairs[1]])
    return float(pair_n[exact].sum() / len(truth))


@dataclass
class WindowCounts:
    """Sparse counts of messages per (window, device, template): one row per non-empty cell,
    sorted by window, device, template. ``window`` is ``time // window_ns`` (absolute)."""

    window: np.ndarray
    device: np.ndarray
    template: np.ndarray
    count: np.ndarray
    window_ns: int


def window_counts(
    time: np.ndarray, device: np.ndarray, template: np.ndarray, window_ns: int
) -> WindowCounts:
    """Count messages per (``window_ns`` window, device, template)."""
    if window_ns <= 0:
        raise ConfigError(f"window must be positive, not {window_ns} ns")
    w = np.asarray(time, dtype=np.int64) // window_ns
    keys = np.stack([w, np.asarray(device, np.int64), np.asarray(template, np.int64)])
    cells, count = np.unique(keys, axis=1, return_counts=True)
    return WindowCounts(cells[0], cells[1], cells[2], count.astype(np.int64), window_ns)

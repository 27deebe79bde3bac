"""The names :mod:`tacit.oneway_latency` exports, each imported on first use (``__init__.py``)."""

from .agent import Agent, AgentParams
from .capture_sources import LiveSource, PcapSource
from .comparison import METHODS, MethodScore, compare_methods
from .estimate import LatencyEstimate
from .finecomb import FineCombParams, finecomb_interval
from .intervals import IntervalParams, IntervalSplit, IntervalWork, pipeline
from .lda import LDAParams, lda_interval
from .protocol import Channel, ConfigMismatchError, ProtocolError
from .rda import RDAParams, ReconcileResult, rda_interval
from .replay import ReplayedCapture, ReplayParams, replay_capture
from .simulate import SimulatedStream, StreamParams, replay_stream, simulate_stream
from .srda import SRDAParams, srda_interval
from .stream import PacketStream
from .sweep import SweepParams, SweepResult, plot_sweep, run_once, run_sweep
from .truth import IntervalTruth, latency_truth

__all__ = [
    "METHODS",
    "Agent",
    "AgentParams",
    "Channel",
    "ConfigMismatchError",
    "FineCombParams",
    "IntervalParams",
    "IntervalSplit",
    "IntervalTruth",
    "IntervalWork",
    "LDAParams",
    "LatencyEstimate",
    "LiveSource",
    "MethodScore",
    "PacketStream",
    "PcapSource",
    "ProtocolError",
    "RDAParams",
    "ReconcileResult",
    "ReplayParams",
    "ReplayedCapture",
    "SRDAParams",
    "SimulatedStream",
    "StreamParams",
    "SweepParams",
    "SweepResult",
    "compare_methods",
    "finecomb_interval",
    "latency_truth",
    "lda_interval",
    "pipeline",
    "plot_sweep",
    "rda_interval",
    "replay_capture",
    "replay_stream",
    "run_once",
    "run_sweep",
    "simulate_stream",
    "srda_interval",
]

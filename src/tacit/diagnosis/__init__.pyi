"""The names :mod:`tacit.diagnosis` exports, each imported on first use (``__init__.py``)."""

from .abtest import ab_power, ab_traces, route_to_b, self_time_factor
from .critical_path import CriticalPaths, critical_paths, weigh_uncertain_links
from .detect import Detection, DetectParams, detect
from .execution_graph import ExecutionGraph, GraphParams, build_graph
from .explain import ExplainParams, baseline_contributions, explain, trace_features, trace_rules
from .problem_graphs import graphs_for_rpcs, problem_graphs
from .queueing import QueueingParams, queueing_delay
from .rules import RuleSet, RuleSyntaxError, parse_rules, read_rules
from .syslog_causality import CausalityParams, mine_syslog_rules
from .syslog_templates import grouping_accuracy, mine_templates
from .tail import TailParams, TailProfile, span_tail_profile, tail_profile
from .tcpinfo import PathSplitParams, rpc_tcp_stats, split_rpcs

__all__ = [
    "CausalityParams",
    "CriticalPaths",
    "DetectParams",
    "Detection",
    "ExecutionGraph",
    "ExplainParams",
    "GraphParams",
    "PathSplitParams",
    "QueueingParams",
    "RuleSet",
    "RuleSyntaxError",
    "TailParams",
    "TailProfile",
    "ab_power",
    "ab_traces",
    "baseline_contributions",
    "build_graph",
    "critical_paths",
    "detect",
    "explain",
    "graphs_for_rpcs",
    "grouping_accuracy",
    "mine_syslog_rules",
    "mine_templates",
    "parse_rules",
    "problem_graphs",
    "queueing_delay",
    "read_rules",
    "route_to_b",
    "rpc_tcp_stats",
    "self_time_factor",
    "span_tail_profile",
    "split_rpcs",
    "tail_profile",
    "trace_features",
    "trace_rules",
    "weigh_uncertain_links",
]

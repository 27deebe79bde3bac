"""End-to-end diagnosis of slow requests (YTrace: "End-to-end Performance Diagnosis in Large
Cloud and Content Providers"): detection, critical-path localization, subset queries (the slowest
requests, A/B tests; TraceWeaver §6.4), network syslog causality, and root-cause rules.

- :mod:`~.detect`: per-key IQR baselines, flagged slower or faster.
- :mod:`~.execution_graph` and :mod:`~.critical_path`: happens-before between sibling calls,
  the critical path, each service's contribution.
- :mod:`~.tail` and :mod:`~.abtest`: the slowest p% against all traffic; A/B comparisons
  (:mod:`~.inject` injects delays and versions into real traces).
- :mod:`~.queueing`, :mod:`~.syslog_templates`, :mod:`~.syslog_causality`,
  :mod:`~.problem_graphs`: the network side.
- :mod:`~.rules` and :mod:`~.tcpinfo`: root-cause rules; the client and Internet path.
- :mod:`~.explain`: root-cause rules on the features of slow traces.
"""

from tacit.diagnosis.abtest import ab_power, ab_traces, route_to_b, self_time_factor
from tacit.diagnosis.critical_path import CriticalPaths, critical_paths, weigh_uncertain_links
from tacit.diagnosis.detect import Detection, DetectParams, detect
from tacit.diagnosis.execution_graph import ExecutionGraph, GraphParams, build_graph
from tacit.diagnosis.explain import (
    ExplainParams,
    baseline_contributions,
    explain,
    trace_features,
    trace_rules,
)
from tacit.diagnosis.problem_graphs import graphs_for_rpcs, problem_graphs
from tacit.diagnosis.queueing import QueueingParams, queueing_delay
from tacit.diagnosis.rules import RuleSet, RuleSyntaxError, parse_rules, read_rules
from tacit.diagnosis.syslog_causality import CausalityParams, mine_syslog_rules
from tacit.diagnosis.syslog_templates import grouping_accuracy, mine_templates
from tacit.diagnosis.tail import TailParams, TailProfile, span_tail_profile, tail_profile
from tacit.diagnosis.tcpinfo import PathSplitParams, rpc_tcp_stats, split_rpcs
from tacit.model.topology import Topology

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
    "Topology",
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

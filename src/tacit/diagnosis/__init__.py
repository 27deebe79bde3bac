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

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

"""Request trace reconstruction from spans without trace identifiers (TraceWeaver and baselines).

- :mod:`~.callgraph`: call graphs with dependency order, learned from test traces (§5.2.2).
- :mod:`~.isolated`: test traces woven from requests replayed one at a time (§5.2.1).
- :mod:`~.blind_callgraph`: a call graph learned from production's own spans, from the requests
  that ran alone at their instance or kept their context.
- :mod:`~.traceweaver`: the reconstruction (§4); :mod:`~.online` streams it (§5.3).
- :mod:`~.baselines`: FCFS, WAP5's nearest parent and vPath's threads (§6).
- :mod:`~.scaleout`: TraceWeaver cut into independent parts, per instance and time window, run
  on a Dask cluster (§6.5, §6.6).
- :mod:`~.trace_stream`: spans with trace context read as a stream, observed trace by trace.
- :mod:`~.alternatives`: each call's top-K candidate parents, as columns.
- :mod:`~.pipeline`: an algorithm by name; blind spans, or a stream of them, into assembled
  traces.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

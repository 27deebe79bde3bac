"""``tacit serve``: a long-running service in the observability stack.

OTLP in (:mod:`.http_server` answering with :mod:`.http_routes`, :mod:`.grpc_receiver`, both
through :mod:`.ingest`, which acknowledges a request only once it is durable in the store),
traces reconstructed online
(:mod:`.online_feed`, :mod:`.reconstructor`: TraceWeaver §5.3), stored in an embedded DuckDB
file (:mod:`.store`, :mod:`.finished_rows`), served through the Jaeger query API
(:mod:`.jaeger_api`) and a web page of its own, counted at ``/metrics`` (:mod:`.metrics`) and
optionally sent on to a collector (:mod:`.forward`). Beside traces, two latency series:
Pirate's response latency from captured packets (:mod:`.pirate_feed`) and RDA agents' one-way
latency records (:mod:`.rda_feed`), both stored and served (:mod:`.latency_api`). Nothing of
the inference lives here: it calls the same library functions the commands call.

Beyond one process (``role``, docs/scale-out.md): ingest replicas append to a shared log on
NATS JetStream (:mod:`.replicas`, :mod:`.log_ingest`, :mod:`.span_log`), the reconstruct role
reads it (:mod:`.log_feed`), each round's offline step may run on a Dask cluster
(:class:`tacit.reconstruct.scaleout.DaskRounds`), and query replicas read the finished traces
as Parquet blocks (:mod:`.store_blocks`).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

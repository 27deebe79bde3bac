"""The embedded store of ``tacit serve``: one DuckDB database file.

Its tables and what each column holds: :mod:`.store_schema` (``docs/serve.md`` points there
for people who query the file directly). The store is split by domain, each a mixin over the
one connection (:mod:`.store_db`: cursors, transactions, the journal moved in, the ``state``
table): the traces (:mod:`.store_traces`) and the latency series (:mod:`.store_latency`).
:class:`Store` joins them; its names are the ones the rest of the service imports from here.
"""

from __future__ import annotations

from tacit.serve.store_db import Database, cannot_write
from tacit.serve.store_latency import LatencyStore
from tacit.serve.store_traces import Expired, TraceQuery, TraceStore, tag_value_text, unpack_doc

__all__ = [
    "Expired",
    "Store",
    "TraceQuery",
    "cannot_write",
    "tag_value_text",
    "unpack_doc",
]


class Store(TraceStore, LatencyStore, Database):
    """The database file at ``path`` (created with the schema when absent)."""

"""The schema of the store of ``tacit serve`` (:mod:`.store`): its tables, and what each of
their columns holds, in one place, apart from the code that reads and writes them, for the
people who query the file directly as for that code (``docs/serve.md`` points here).

``ingest``
    Every acknowledged OTLP request, verbatim: ``first_seq`` (the sequence number of its first
    span; spans are numbered in the order they were acknowledged), ``spans``, ``received_ns``,
    ``encoding`` (``protobuf`` or ``json``) and ``body``. A request is written to the journal
    (:mod:`.journal`: files ``<database>.journal.<n>`` beside it) and synced before its sender
    is told it was accepted, and moved here with the next round of finished traces, or when
    the file is opened or closed; so a crash loses nothing acknowledged: the restart moves in
    what the journal holds and reads back whatever had not been reconstructed yet.
``spans``
    Every span once its trace is final, with the parent TraceWeaver chose: ``seq``,
    ``trace_id``, ``span_id``, ``parent_span_id``, ``service``, ``instance``, ``operation``,
    ``kind``, ``start_ns``, ``duration_ns``, ``parent_service``, ``score`` (of the chosen
    parent), ``alternatives`` (JSON ``[[span id, score, share], ...]``, best first: each
    candidate parent's share of the call's alternatives), ``unmapped`` (why no parent was
    chosen), ``link`` (``given`` where the parent is the one the sender gave, kept rather than
    inferred; ``virtual`` for a span drawn for a service that sent none), ``probability`` (of
    a client span: that its parent, or its having none, is right), ``status`` (OTLP's status
    code: 0 unset, 1 ok, 2 error), what the sender gave: ``given_trace_id``,
    ``given_parent_id``, and the span's parts of its Jaeger document: ``tags`` and ``logs``
    (JSON, as the Jaeger API writes them; ``logs`` NULL for none) and ``process`` (a key of
    ``processes``). The tags are the span's own: a document adds the reconstruction's
    evidence (``tacit.algorithm``, ``tacit.score``, ``tacit.probability``,
    ``tacit.alternatives``, ``tacit.unmapped``, ``tacit.link``, and on the root
    ``tacit.trace_probability``) from the columns (rows an earlier version wrote hold some of
    it in their tags too, the same). Ids are the ones the Jaeger API shows (lower-case hex,
    zero-padded to 16 and 32 digits).
``processes``
    The processes of the spans, each once: ``process`` (the key), ``service``, ``tags`` (JSON).
``callgraphs``
    Each call graph learned, or reloaded from its file: ``at_ns`` (when it took effect) and
    ``yaml``.
``traces``
    One row per reconstructed trace: ``trace_id`` (indexed), its root's ``service`` and
    ``operation``, ``start_ns``, ``duration_ns``, ``spans``, ``min_score``, ``finished_ns``,
    ``first_seq`` and ``last_seq`` (the numbers of its first and last span, which find its
    spans), ``probability`` (that the whole trace is right: its root's
    ``tacit.trace_probability``), and ``doc``: NULL, but in the rows of a file written before
    the spans held their documents' parts, where it holds the trace's Jaeger JSON,
    zlib-compressed (``zlib.decompress`` in Python) or as text
    (:func:`.store_traces.unpack_doc`). Documents are made from the spans' parts when asked
    for (:meth:`.store_traces.TraceStore.find_traces`).
``trace_operations``
    For searches: one row per trace, service and operation, with the longest such span's
    ``duration_ns``, the earliest ``start_ns``, and the trace's ``trace_start_ns`` (searches
    are ordered by it without reading the documents).
``confidence``
    Per-service confidence as it evolves: ``at_ns``, ``service``, ``links`` and ``probability``
    (per calling service and round of stored traces, its calls and the sum of their links'
    probabilities); ``incoming`` and ``top_choice``, what an earlier version counted instead,
    are NULL since.
``pirate_estimates``
    Pirate's response latency (:mod:`tacit.response_latency`), one row per connection and
    closed epoch: ``source`` (``live:IF`` or the capture file), ``client``, ``server``,
    ``epoch_start_ns``, ``epoch_end_ns``, ``latency_ns``, ``samples`` (the gaps it rests on).
``pirate_packets``
    What became of every packet of each source, running totals: ``source``, ``stage``
    (``capture``: the reader's buckets; ``estimator``: Pirate's, which partition the capture's
    IP packets), ``bucket``, ``packets``.
``rda_intervals``
    RDA one-way latency, one row per interval record of an agent (:mod:`tacit.oneway_latency.
    agent`): ``source`` (the results file, or the name a POST gave), ``role``, ``interval``,
    ``start_ns``, ``end_ns``, ``status``, ``mean_ns``, ``std_ns``, ``packets_sender``,
    ``packets_receiver``, ``matched``, ``set_difference``, ``lost``, ``late``, ``foreign``,
    ``buckets_per_bank``, ``peel_rounds``, ``received_ns``. A record sent again for the same
    source, role and interval replaces the earlier one.
``rda_rejected``
    Lines that were not interval records: ``source``, ``line``, ``reason``, ``received_ns``.
``state``
    ``key`` and ``value``: ``low_water`` (no span before this sequence number is still being
    reconstructed), ``next_position`` (the next stream position), ``seed`` (of the trace ids);
    per RDA results file, ``rda_offset:FILE`` and ``rda_line:FILE`` (how far it has been
    read); per capture file, ``capture:PATH:SIZE:MTIME`` (the exchanges taken); per sidecar
    log, ``envoy:PATH`` (the offset of the first entry not taken in).
"""

SCHEMA = """
CREATE TABLE IF NOT EXISTS ingest(
    first_seq BIGINT, spans INTEGER, received_ns BIGINT, encoding VARCHAR, body BLOB);
CREATE TABLE IF NOT EXISTS spans(
    seq BIGINT, trace_id VARCHAR, span_id VARCHAR, parent_span_id VARCHAR, service VARCHAR,
    instance VARCHAR, operation VARCHAR, kind VARCHAR, start_ns BIGINT, duration_ns BIGINT,
    parent_service VARCHAR, score DOUBLE, alternatives VARCHAR, unmapped VARCHAR,
    given_trace_id VARCHAR, given_parent_id VARCHAR);
CREATE TABLE IF NOT EXISTS processes(process BIGINT PRIMARY KEY, service VARCHAR, tags VARCHAR);
CREATE TABLE IF NOT EXISTS callgraphs(at_ns BIGINT, yaml VARCHAR);
CREATE TABLE IF NOT EXISTS traces(
    trace_id VARCHAR, service VARCHAR, operation VARCHAR, start_ns BIGINT, duration_ns BIGINT,
    spans INTEGER, min_score DOUBLE, finished_ns BIGINT, doc BLOB);
CREATE TABLE IF NOT EXISTS trace_operations(
    trace_id VARCHAR, service VARCHAR, operation VARCHAR, start_ns BIGINT, duration_ns BIGINT,
    trace_start_ns BIGINT);
CREATE TABLE IF NOT EXISTS confidence(
    at_ns BIGINT, service VARCHAR, incoming BIGINT, top_choice BIGINT);
CREATE TABLE IF NOT EXISTS pirate_estimates(
    source VARCHAR, client VARCHAR, server VARCHAR, epoch_start_ns BIGINT, epoch_end_ns BIGINT,
    latency_ns BIGINT, samples BIGINT);
CREATE TABLE IF NOT EXISTS pirate_packets(
    source VARCHAR, stage VARCHAR, bucket VARCHAR, packets BIGINT,
    PRIMARY KEY (source, stage, bucket));
CREATE TABLE IF NOT EXISTS rda_intervals(
    source VARCHAR, role VARCHAR, interval BIGINT, start_ns BIGINT, end_ns BIGINT,
    status VARCHAR, mean_ns DOUBLE, std_ns DOUBLE, packets_sender BIGINT,
    packets_receiver BIGINT, matched BIGINT, set_difference BIGINT, lost BIGINT, late BIGINT,
    "foreign" BIGINT, buckets_per_bank BIGINT, peel_rounds BIGINT, received_ns BIGINT,
    PRIMARY KEY (source, role, interval));
CREATE TABLE IF NOT EXISTS rda_rejected(
    source VARCHAR, line BIGINT, reason VARCHAR, received_ns BIGINT);
CREATE TABLE IF NOT EXISTS state(key VARCHAR PRIMARY KEY, value BIGINT);
"""
"""The first version of the schema, which a new file is created with."""
TRACES_INDEX = "CREATE INDEX IF NOT EXISTS traces_by_id ON traces(trace_id)"
ADDED_COLUMNS = {
    "spans": (
        ("tags", "VARCHAR"),
        ("logs", "VARCHAR"),
        ("process", "BIGINT"),
        ("link", "VARCHAR"),
        ("probability", "DOUBLE"),
        ("status", "BIGINT"),
    ),
    "traces": (("first_seq", "BIGINT"), ("last_seq", "BIGINT"), ("probability", "DOUBLE")),
    "confidence": (("links", "BIGINT"), ("probability", "DOUBLE")),
}
"""Columns added since the first version of the schema (:data:`SCHEMA`), in the order
added, by ``ALTER TABLE ... ADD COLUMN`` (:meth:`.store_db.Database._upgrade`), to a new file
as to one of an earlier version: after the first version's columns."""

"""CSV span tables, as published with the Nezha and similar microservice benchmark datasets.

One span per line under the header ``TraceID,SpanID,ParentID,PodName,OperationName,
StartTimeUnixNano,EndTimeUnixNano`` (other columns, such as ``Duration``, are ignored). A
``ParentID`` of ``root`` or empty marks a root span. The files record neither the span kind nor
the service, only the Kubernetes pod: the kind is left UNKNOWN for
:func:`tacit.model.roles.infer_roles` to decide, and the service is the pod's workload name
(:func:`workload_name`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tacit.errors import InputError
from tacit.formats.common import Paths, input_files
from tacit.formats.fields import RecordReader
from tacit.formats.span_join import join_inputs
from tacit.formats.textio import csv_rows, read_bytes
from tacit.model.spans import UNKNOWN, SpanInput, SpanTable, SpanTableBuilder, input_from_columns

SUFFIXES = (".csv", ".csv.gz")
COLUMNS = (
    "TraceID",
    "SpanID",
    "ParentID",
    "PodName",
    "OperationName",
    "StartTimeUnixNano",
    "EndTimeUnixNano",
)
ROOT_PARENTS = ("", "root")

_DEPLOYMENT_POD = re.compile(r"(?P<workload>.+)-(?=[0-9a-z]*[0-9])[0-9a-z]{6,10}-[0-9a-z]{5}")
"""``<deployment>-<pod-template-hash>-<pod suffix>``; the hash has a digit (see workload_name)."""


def workload_name(pod: str) -> str:
    """The Deployment a pod belongs to, from the pod's name; other names unchanged.

    Kubernetes names a Deployment's pods ``<deployment>-<pod-template-hash>-<suffix>``: the
    ReplicaSet appends a hash of the pod template (the decimal digits of a 32-bit hash, each mapped
    into ``bcdfghjklmnpqrstvwxz2456789`` in current releases and left as digits in old ones: in
    practice 6 to 10 characters) and the pod a 5-character random suffix. Both are stripped, so
    ``frontend-579b9bff58-t2dbm`` is ``frontend``. To keep ordinary hyphenated names intact
    (``my-redis-master-cache``), the hash must contain a digit, which real hashes practically always
    do. Other pods keep their whole name: StatefulSet pods (``redis-0``), whose ordinal names a
    distinct member, and DaemonSet or bare ReplicaSet pods (``<name>-<suffix>``), whose lone suffix
    cannot be told apart from an ordinary last word.
    """
    m = _DEPLOYMENT_POD.fullmatch(pod)
    return m["workload"] if m else pod


def read_span_csv(paths: Paths) -> SpanTable:
    """Read CSV span tables (or directories of .csv/.csv.gz files) into one table.

    Records are numbered by CSV line (the header is line 1). Several files are one set of
    spans (:func:`.span_join.join_inputs`).
    """
    return join_inputs([read_input(f) for f in input_files(paths, SUFFIXES)]).spans


def read_input(path: Path) -> SpanInput:
    """One file's spans with the parent span id each names: read by Arrow's CSV reader with
    every column converted at once; a file it cannot read cleanly (a malformed row, a value
    that is not an integer, blank lines that shift the line numbers) goes through
    :func:`_read_rows`, which names the offending line."""
    import pyarrow as pa

    data = read_bytes(path)
    table = _read_columns(data)
    if table is None or not _lines_match(data, table.num_rows):
        return _read_rows(path)
    import pyarrow.compute as pc

    times = (table["StartTimeUnixNano"], table["EndTimeUnixNano"])
    pods = table["PodName"].combine_chunks().dictionary_encode()
    names = pods.dictionary.to_pylist()
    if any(t.null_count for t in times) or "" in names:
        return _read_rows(path)
    # The workload of each distinct pod, spread over the rows by Arrow.
    workloads = pa.DictionaryArray.from_arrays(pods.indices, pa.array(map(workload_name, names)))
    parent = table["ParentID"]
    n = table.num_rows
    try:
        spans = input_from_columns(
            str(path),
            {
                "service": workloads.cast(pa.string()),
                "instance": table["PodName"],
                "endpoint": table["OperationName"],
                "trace": table["TraceID"],
                "span_id": table["SpanID"],
                "parent_id": pc.if_else(pc.is_in(parent, pa.array(ROOT_PARENTS)), None, parent),
            },
            kind=np.full(n, UNKNOWN, np.int8),
            start=times[0].to_numpy(),
            end=times[1].to_numpy(),
            record=np.arange(2, n + 2),
        )
    except InputError:
        return _read_rows(path)  # the row-by-row reader gives the same error, word for word
    return spans


def _read_columns(data: bytes):
    """The file as an Arrow table of the known columns, or None when Arrow cannot convert it."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        return pacsv.read_csv(
            pa.py_buffer(data),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                include_columns=list(COLUMNS),
                column_types={
                    **{c: pa.string() for c in COLUMNS[:5]},
                    "StartTimeUnixNano": pa.int64(),
                    "EndTimeUnixNano": pa.int64(),
                },
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowKeyError):
        return None


def _lines_match(data: bytes, rows: int) -> bool:
    """Whether row k is line k + 2: no blank line and no quoted line break shifted them."""
    lines = data.count(b"\n") + (not data.endswith(b"\n"))
    return lines == rows + 1 and b"\n\n" not in data and b"\r\n\r\n" not in data


def _read_rows(path: Path) -> SpanInput:
    builder = SpanTableBuilder(str(path))
    for span in iter_span_rows(path):
        try:
            builder.add(**span)
        except InputError as e:  # the builder numbers records; name the line like the rest
            raise InputError(e.message, path=str(path), record=f"line {span['record']}") from None
    return builder.build_input()


def iter_span_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The spans of one CSV span table, row by row as :meth:`SpanTableBuilder.add` takes them
    (``record``: the line), read incrementally: what a reader of a stream needs."""
    src = str(path)
    rows = csv_rows(path)
    header = next(rows, (0, []))[1]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InputError(f"not a span CSV: missing column(s) {', '.join(missing)}", path=src)
    for line, row in rows:
        if not row:
            continue
        r = RecordReader(src, f"line {line}")
        if len(row) != len(header):
            raise r.fail(f"{len(row)} fields, but the header has {len(header)}")
        rec = dict(zip(header, row, strict=True))
        pod = r.string(rec, "PodName")
        if not pod:
            raise r.fail("empty PodName")
        parent = r.string(rec, "ParentID")
        yield {
            "service": workload_name(pod),
            "instance": pod,
            "endpoint": r.string(rec, "OperationName"),
            "kind": UNKNOWN,
            "start": r.integer(rec, "StartTimeUnixNano"),
            "end": r.integer(rec, "EndTimeUnixNano"),
            "record": line,
            "trace": r.string(rec, "TraceID"),
            "span_id": r.string(rec, "SpanID"),
            "parent_id": None if parent in ROOT_PARENTS else parent,
        }

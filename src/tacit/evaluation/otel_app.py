"""Reconstructed traces of the OpenTelemetry app (``tacit experiment otel-app``) scored against the
app's own truth.

Three inputs: the truth (``truth.jsonl``: each span's id, request and true parent, as the services
knew them), the spans as exported (``spans.jsonl``, OTLP JSON Lines: the parent the SDK gave each
span) and the result, Jaeger traces (``tacit reconstruct --format jaeger``, or ``GET
/api/traces/{id}`` of ``tacit serve``): each span's ``spanID`` and its parent, the ``spanID`` of
its first ``CHILD_OF`` (or ``FOLLOWS_FROM``) reference.

A span's true parent is either given or to be inferred:

- *given*: the exported span names its true parent; a reconstruction need only keep the link;
- *inferred*: the span has a true parent that the exported span does not name (the context was
  lost on the way); a reconstruction must find it;
- *root*: the span has no true parent (the frontend's server span, called by the load generator);
  it must stay a root.

A span of the result that is not in the truth (a span drawn for an uninstrumented hop, a
synthesized caller) stands between observed spans, so a span's parent in the result is its
nearest ancestor that the truth knows: a geo server span under a span drawn for the
uninstrumented search, itself under the frontend's client span to search, has that client span
as its parent, which is its true parent. Such a hop is *drawn* when all the spans it caused hang
from one span that is not in the truth (through others the truth does not know: the hop's
client spans) and whose nearest known ancestor is the hop's caller.

A request is right when every span of it is in the result, once, under its true parent (roots
without one), all in one trace, and no span of another request is in that trace (TraceWeaver's
end-to-end accuracy, SIGCOMM '24 §6.1, on the app's requests).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tacit.errors import InputError
from tacit.formats.textio import iter_json_lines

_REFERENCES = ("CHILD_OF", "FOLLOWS_FROM")


def score_traces(
    truth_path: str | Path,
    traces: list[dict] | dict,
    exported: str | Path | Mapping[str, str | None] | None,
) -> dict[str, Any]:
    """Score ``traces`` (Jaeger trace documents, or the API's ``{"data": [...]}``) against the
    truth at ``truth_path``, with ``exported`` the spans as exported (a file of OTLP JSON Lines,
    or each span id's exported parent id, None for none; ``exported`` None: not at hand, as when
    the app exported to a service that kept them, and the links are not told apart). The counts
    (module docstring):

    - ``spans``: spans in the truth; ``exported``: of them, exported; ``found``: in the result;
      ``missing``: not in the result; ``duplicated``: in the result more than once; ``extra``:
      spans of the result the truth does not know;
    - ``given``: ``links`` (of exported spans), and of them ``kept``; ``inferred``: ``links``,
      and ``right``; ``roots``: ``spans``, and ``right`` (still roots); each with its ``share``;
    - ``requests``: ``total``, and ``right``, with its ``share``;
    - ``unobserved_hops``: ``hops`` in the truth, and ``drawn``.
    """
    truth, hops = read_truth(truth_path)
    if exported is None or isinstance(exported, Mapping):
        given = exported or {}
    else:
        given = exported_parents(exported)
    result = _Result(traces, set(truth))
    links: dict[str, list[bool]] = {"given": [], "inferred": [], "roots": []}
    right_span: dict[str, bool] = {}
    for span_id, row in truth.items():
        right = span_id in result.parent and result.known_parent(span_id) == row["parent_span_id"]
        right_span[span_id] = right and result.count[span_id] == 1
        if row["parent_span_id"] is None:
            links["roots"].append(right)
        elif span_id in given:
            kind = "given" if given[span_id] == row["parent_span_id"] else "inferred"
            links[kind].append(right)
    requests = _right_requests(truth, right_span, result)
    found = sum(s in result.parent for s in truth)
    return {
        "spans": len(truth),
        "exported": sum(s in given for s in truth),
        "found": found,
        "missing": len(truth) - found,
        "duplicated": sum(result.count[s] > 1 for s in truth),
        "extra": sum(s not in truth for s in result.parent),
        "given": _share("links", "kept", links["given"]),
        "inferred": _share("links", "right", links["inferred"]),
        "roots": _share("spans", "right", links["roots"]),
        "requests": _share("total", "right", requests),
        "unobserved_hops": {
            "hops": len(hops),
            "drawn": sum(_drawn(hop, truth, result) for hop in hops),
        },
    }


def read_truth(path: str | Path) -> tuple[dict[str, dict], list[dict]]:
    """The truth's spans by span id, and its unobserved hops (the lines without one)."""
    spans: dict[str, dict] = {}
    hops: list[dict] = []
    for lineno, row in iter_json_lines(path):
        if not isinstance(row, dict) or "parent_span_id" not in row or "request_id" not in row:
            raise InputError(
                "not a truth line of the otel app", path=str(path), record=f"line {lineno}"
            )
        if row.get("span_id") is None:
            hops.append(row)
        else:
            spans[str(row["span_id"]).lower()] = row
    return spans, hops


def exported_parents(path: str | Path) -> dict[str, str | None]:
    """Each exported span's id and the id of the parent it names (None: none), from a file of
    OTLP JSON Lines with hex ids (what the app's receiver and the Collector write)."""
    parents: dict[str, str | None] = {}
    for lineno, doc in iter_json_lines(path):
        try:
            for resource_spans in doc.get("resourceSpans", ()):
                for scope_spans in resource_spans.get("scopeSpans", ()):
                    for span in scope_spans.get("spans", ()):
                        parents[span["spanId"].lower()] = (
                            span.get("parentSpanId") or ""
                        ).lower() or None
        except (AttributeError, KeyError, TypeError) as e:
            raise InputError(
                f"not an OTLP export: {e!r}", path=str(path), record=f"line {lineno}"
            ) from None
    return parents


class _Result:
    """The result's spans: each span id's parent id (None: a root), trace and count; which ids
    the truth knows (``known``)."""

    def __init__(self, traces: list[dict] | dict, known: set[str]) -> None:
        docs = traces.get("data", []) if isinstance(traces, dict) else traces
        self.known = known
        self.parent: dict[str, str | None] = {}
        self.trace: dict[str, str] = {}
        self.count: defaultdict[str, int] = defaultdict(int)
        for doc in docs:
            for span in doc.get("spans", ()):
                span_id = str(span["spanID"]).lower()
                self.count[span_id] += 1
                if span_id in self.parent:
                    continue
                self.parent[span_id] = _parent(span)
                self.trace[span_id] = str(span.get("traceID", doc.get("traceID")))

    def known_parent(self, span_id: str) -> str | None:
        """The nearest ancestor of ``span_id`` that the truth knows (None: none, or a cycle)."""
        seen = {span_id}
        parent = self.parent.get(span_id)
        while parent is not None and parent not in self.known:
            if parent in seen:
                return None
            seen.add(parent)
            parent = self.parent.get(parent)
        return parent


def _parent(span: dict) -> str | None:
    for ref in span.get("references") or ():
        if ref.get("refType", "CHILD_OF") in _REFERENCES:
            return str(ref["spanID"]).lower()
    return None


def _right_requests(
    truth: dict[str, dict], right_span: dict[str, bool], result: _Result
) -> list[bool]:
    """Per request of the truth, whether its whole trace is right (module docstring)."""
    spans_of: defaultdict[str, list[str]] = defaultdict(list)
    for span_id, row in truth.items():
        spans_of[row["request_id"]].append(span_id)
    requests_in: defaultdict[str, set[str]] = defaultdict(set)  # trace → requests in it
    for span_id, trace in result.trace.items():
        if span_id in truth:
            requests_in[trace].add(truth[span_id]["request_id"])
    verdicts = []
    for request, spans in spans_of.items():
        traces = {result.trace.get(s) for s in spans}
        if not all(right_span[s] for s in spans) or len(traces) != 1:
            verdicts.append(False)
            continue
        (only,) = traces
        verdicts.append(only is not None and requests_in[only] == {request})
    return verdicts


def _drawn(hop: dict, truth: dict[str, dict], result: _Result) -> bool:
    """Whether the result drew ``hop``: the spans it caused (the truth's spans of its request
    whose true parent is its caller) hang, through spans the truth does not know (the hop's own
    server span, and perhaps its client spans), from one such span right below the caller."""
    caller = hop["parent_span_id"]
    caused = [
        s
        for s, row in truth.items()
        if row["parent_span_id"] == caller and row["request_id"] == hop["request_id"]
    ]
    tops = {_top_unknown(s, truth, result) for s in caused}
    if not caused or len(tops) != 1:
        return False
    return tops.pop() is not None and result.known_parent(caused[0]) == caller


def _top_unknown(span_id: str, truth: dict[str, dict], result: _Result) -> str | None:
    """The highest of the spans the truth does not know between ``span_id`` and its nearest
    known ancestor (None: its parent is known, or it has none)."""
    top, parent, seen = None, result.parent.get(span_id), {span_id}
    while parent is not None and parent not in truth and parent not in seen:
        seen.add(parent)
        top, parent = parent, result.parent.get(parent)
    return top


def _share(total: str, good: str, verdicts: list[bool]) -> dict[str, Any]:
    n, k = len(verdicts), sum(verdicts)
    return {total: n, good: k, "share": round(k / n, 4) if n else None}

"""Values a request passes on to the calls it makes: evidence of which request made a call where
timing alone leaves it open.

A service often calls onward with an argument of the request it serves (the place it was asked
about, a user or an order id), so a call's request target shares a value with its cause's. Such
*transaction fields* are what DeepTrace (SIGCOMM '25) correlates spans by; here they are one
more term of TraceWeaver's candidate score (§4.1), weighed by what they showed in the previous
mapping, as the gap models are refit on it:

* a span's values are those of its request target (:func:`request_values`): each query
  parameter's value, and its comma-separated parts, and each path segment with a digit in it
  (an id; the route's words are the same for every request of an endpoint);
* a request's values are its own, and those below the calls it is known to have made: the
  calls its sender gave it and, within one candidate, the calls that share one of its values,
  and so on (below a call: its server span, and through the parents their senders gave, the
  calls that made and theirs). A service may pass on what it got from one callee to another:
  a front end that asked search for hotels near a place (the place passed on) and then asks
  profile for the hotels search found, whose ids search had passed on to the rate service.
  Values reached only through calls that share none of the request's are not the request's: a
  candidate made of another request's calls gains nothing from their sharing among themselves;
* a call *shares* with a request when one of its own values is among the request's; per edge
  of the call graph, ``p`` is the share of the calls the previous mapping gave a request that
  share with it, and ``q`` the share of the other candidate pairings
  along the edge that do (each with a Laplace prior, so that a handful of calls decides little);
* a candidate gains ``log(p / q)`` for a call sharing a value with its request and
  ``log((1 - p) / (1 - q))`` for one that does not, so that an edge whose calls share no more
  often than chance adds nothing.

The first mapping has no term (nothing to weigh it by), and nor has a problem in which no span
names a value. The values re-rank the candidates the timing search kept (:mod:`.beam`): a call
the search left out of a request's best candidates, as it does for some under overload, is not
brought back by them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from tacit.model.spans import CLIENT, NONE, SpanTable
from tacit.reconstruct.candidates import CandidateSet

TARGET_PATH = "url.path"
TARGET_QUERY = "url.query"
"""The attributes a drawn span names its request target by (the stable conventions')."""


def request_target(attributes: Mapping[str, Any]) -> tuple[str, str] | None:
    """The path and query of a span's request, from a client's URL (``url.full``, ``http.url``)
    or a server's target (``http.target``, ``url.path`` and ``url.query``); None: not named."""
    url = attributes.get("url.full", attributes.get("http.url"))
    if isinstance(url, str):
        try:
            parts = urlsplit(url)
        except ValueError:
            return None
        return parts.path, parts.query
    target = attributes.get("http.target")
    if isinstance(target, str):
        before, _, after = target.partition("?")
        return before, after
    path, query = attributes.get(TARGET_PATH), attributes.get(TARGET_QUERY)
    if isinstance(path, str):
        return path, query if isinstance(query, str) else ""
    return None


def request_values(attributes: Mapping[str, Any]) -> frozenset[str]:
    """The values a span's request target carries (module docstring)."""
    target = request_target(attributes)
    if target is None:
        return frozenset()
    path, query = target
    values = {seg for seg in path.split("/") if any(c.isdigit() for c in seg)}
    for _, value in parse_qsl(query, keep_blank_values=False):
        values.add(value)
        values.update(part for part in value.split(",") if part)
    return frozenset(values)


class SharedValues:
    """The values of the rows of one mapping problem, the values below each call, and the
    evidence they give each candidate (module docstring). ``below`` gives the values below
    calls whose callees are not among ``spans``' rows (:meth:`below` finds the others)."""

    def __init__(
        self, spans: SpanTable, rows: np.ndarray, below: Mapping[int, set[str]] | None = None
    ) -> None:
        self._spans = spans
        self._own: dict[int, frozenset[str]] = {}
        self._below: dict[int, set[str]] = dict(below or {})
        self._children: dict[int, list[int]] | None = None
        self.requests: dict[int, set[str]] = {}
        """Per incoming row, the values below the calls its sender gave it."""
        if spans.details is not None and len(rows):
            self._any = any(self.own(r) for r in rows.tolist())
        else:
            self._any = False

    def __bool__(self) -> bool:
        return self._any

    def own(self, row: int) -> frozenset[str]:
        """The values of the span at ``row``'s own request target."""
        values = self._own.get(row)
        if values is None:
            detail = None if self._spans.details is None else self._spans.details[row]
            values = frozenset() if detail is None else request_values(detail.attributes)
            self._own[row] = values
        return values

    def below(self, call: int) -> set[str]:
        """The values of the spans below the call at ``call``: its server span and, through the
        parents their senders gave, the calls it made and theirs."""
        known = self._below.get(call)
        if known is not None:
            return known
        found: set[str] = set()
        server = int(self._spans.link[call])
        if server != NONE:
            found.update(self.own(server))
            for child in self._children_of(server):
                found.update(self.own(child))
                found.update(self.below(child))
        self._below[call] = found
        return found

    def given(self, calls: dict[int, list[int]]) -> None:
        """The calls each incoming row made that their senders gave it: the values below them
        are the request's too."""
        self.requests = {p: set().union(*(self.below(c) for c in cs)) for p, cs in calls.items()}

    def shares(self, cs: CandidateSet) -> np.ndarray:
        """Per candidate and slot, whether the call's values meet the request's: its own, those
        below the calls its sender gave it, and those below the candidate's calls that meet
        them, and so on (False for a skipped slot)."""
        out = np.zeros(cs.calls.shape, dtype=bool)
        for c, (inc, calls) in enumerate(zip(cs.incoming.tolist(), cs.calls.tolist(), strict=True)):
            known = set(self.own(inc)) | set(self.requests.get(inc, ()))
            waiting = [(j, self.own(call)) for j, call in enumerate(calls) if call >= 0]
            waiting = [(j, values) for j, values in waiting if values]
            while known and waiting:
                met = [(j, v) for j, v in waiting if not known.isdisjoint(v)]
                if not met:
                    break
                for j, _ in met:
                    out[c, j] = True
                    known.update(self.below(calls[j]))
                waiting = [(j, v) for j, v in waiting if not out[c, j]]
        return out

    def _children_of(self, server: int) -> list[int]:
        if self._children is None:
            spans = self._spans
            rows = np.flatnonzero((spans.kind == CLIENT) & (spans.parent != NONE))
            children: dict[int, list[int]] = {}
            for child, parent in zip(rows.tolist(), spans.parent[rows].tolist(), strict=True):
                children.setdefault(parent, []).append(child)
            self._children = children
        return self._children.get(server, [])


class ShareModel:
    """Per edge (a model index of :class:`~.beam.PathSpec`), the log-odds a call sharing a value
    with its candidate request gains, and the one not sharing gains (module docstring)."""

    def __init__(self, n_edges: int) -> None:
        self.gain_shared = np.zeros(n_edges)
        self.gain_apart = np.zeros(n_edges)

    @classmethod
    def fit(
        cls,
        n_edges: int,
        shares: Sequence[np.ndarray],
        calls: Sequence[np.ndarray],
        models: Sequence[np.ndarray],
        chosen: Sequence[np.ndarray],
    ) -> ShareModel:
        """The model of a mapping: per candidate set, ``shares`` (:meth:`SharedValues.shares`),
        ``calls`` (the set's call rows), the edge of each slot (``models``) and the indices of
        the chosen candidates."""
        counts = np.zeros((2, 2, n_edges))  # [chosen?, shared?, edge]
        for sh, cl, model, pick in zip(shares, calls, models, chosen, strict=True):
            made = cl >= 0
            is_chosen = np.zeros(len(cl), dtype=bool)
            is_chosen[pick] = True
            edge = np.broadcast_to(model, cl.shape)
            for k, rows in ((1, is_chosen), (0, ~is_chosen)):
                m = made & rows[:, None]
                np.add.at(counts[k, 1], edge[m & sh], 1)
                np.add.at(counts[k, 0], edge[m & ~sh], 1)
        p = (counts[1, 1] + 1) / (counts[1].sum(axis=0) + 2)
        q = (counts[0, 1] + 1) / (counts[0].sum(axis=0) + 2)
        out = cls(n_edges)
        out.gain_shared = np.log(p) - np.log(q)
        out.gain_apart = np.log1p(-p) - np.log1p(-q)
        return out

    def score(self, shares: np.ndarray, calls: np.ndarray, model: np.ndarray) -> np.ndarray:
        """Each candidate's gain: the sum over its calls."""
        gain = np.where(shares, self.gain_shared[model], self.gain_apart[model])
        return np.where(calls >= 0, gain, 0.0).sum(axis=1)

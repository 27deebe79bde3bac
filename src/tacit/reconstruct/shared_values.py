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
* per edge of the call graph, ``p`` is the share of the calls the previous mapping gave a
  request that share a value with it, and ``q`` the share of the other candidate pairings
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

from tacit.model.spans import SpanTable
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
    """The values of the rows of one mapping problem, and the evidence they give each candidate."""

    def __init__(self, spans: SpanTable, rows: np.ndarray) -> None:
        self._values: dict[int, frozenset[str]] = {}
        details = spans.details
        if details is not None:
            for row in rows.tolist():
                detail = details[row]
                if detail is not None and (values := request_values(detail.attributes)):
                    self._values[row] = values

    def __bool__(self) -> bool:
        return bool(self._values)

    def shares(self, cs: CandidateSet) -> np.ndarray:
        """Per candidate and slot, whether the call shares a value with the candidate's
        incoming span (False for a skipped slot)."""
        out = np.zeros(cs.calls.shape, dtype=bool)
        values = self._values
        for c, (inc, calls) in enumerate(zip(cs.incoming.tolist(), cs.calls.tolist(), strict=True)):
            mine = values.get(inc)
            if mine is None:
                continue
            for j, call in enumerate(calls):
                theirs = values.get(call) if call >= 0 else None
                if theirs is not None and not mine.isdisjoint(theirs):
                    out[c, j] = True
        return out


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

"""Call graphs with dependency order, learned from isolated test traces or read from YAML.

TraceWeaver (SIGCOMM '24, §4.1 and §5.2.2): for every (service, endpoint), the backend calls a
request makes and the order between them. A call *slot* is one backend endpoint and its
occurrence number (a request may call the same backend twice). The dependency order is learned by
*eliminating violated orderings*: start from "every slot precedes every other" and remove
``a -> b`` as soon as one request shows ``b`` starting before ``a`` ended. What survives is the
"always sequential" relation; slots unordered either way run in parallel. Gaps are modelled along
the immediate predecessors (the transitive reduction).

§5.2.2 learns the order "for each set of test traces which cover the same path". An endpoint's
*paths* are the distinct sets of calls its test requests made (which backends, how many times
each), each with its own dependency order and frequency: a cache hit that skips a call, a route
of a front end that serves several pages through one endpoint (Nezha's OnlineBoutique), a call
repeated once per item of a cart, a join that calls onward once for several incoming calls of
one request (Media Microservices' compose-review-service) all show up as separate paths. The
union of the paths (every slot, present with some probability, ordered where every request that
makes both calls orders them) is the endpoint's single call graph of §4.1 and §4.2, which the
baselines use and which the paper's reconstruction uses when ``TraceWeaverParams.call_paths`` is
off.

Real clients break the paper's assumption (i) that a call lies inside the request that made it:
an asynchronous client library may close its span after the handler has responded (Media
Microservices' MongoFind* spans end up to a millisecond after their parent), and a call recorded
only at the callee carries the callee's clock. Each slot therefore carries how early it may start
and how late it may end relative to its request, learned from the test requests with a margin
(:data:`TOLERANCE_MARGIN`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import yaml

from tacit.budget import check_allocation
from tacit.config_fields import flag, number, parse_yaml, read_yaml
from tacit.errors import ConfigError
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable, StringPool
from tacit.outputs import write_bytes

TOLERANCE_MARGIN = 2.0
"""Learned start/end tolerances are this many times the largest overshoot seen in the test
requests: other loads of the same system overshoot somewhat further than one sample shows."""


@dataclass(frozen=True)
class Slot:
    """One backend call position: callee service and endpoint, and which occurrence.

    ``early_ns`` and ``late_ns``: how long before the request's arrival the call may start and
    how long after its response it may end (0: strictly inside, the paper's assumption).
    """

    service: str
    endpoint: str
    occurrence: int
    probability: float = 1.0
    early_ns: int = 0
    late_ns: int = 0

    @property
    def callee(self) -> tuple[str, str]:
        return (self.service, self.endpoint)


@dataclass
class CallPath:
    """A set of calls and their dependency order.

    ``preds[j]`` lists the immediate predecessors of slot ``j``: calls that always finish before
    ``j`` starts, with implied (transitive) orderings removed. ``requests`` counts the test
    requests that showed it.
    """

    slots: list[Slot]
    preds: list[list[int]]
    requests: int = 0
    role: str | None = None
    """At a join (:class:`Join`): the path of the request that calls onward ("trigger") or of
    the others ("member"); None elsewhere."""
    anchors: list[int | None] = field(default_factory=list)
    """Per slot, the sibling slot whose call its gap is measured from (None, or no entry: from
    its trigger, as the paper does); see :func:`_anchors`."""
    anchor_ends: list[bool] = field(default_factory=list)
    """Per anchored slot, True where its gap is measured from the end of the anchor's call,
    not its start (no entry: from the start)."""

    def anchor(self, j: int) -> int | None:
        """The slot whose call slot ``j``'s gap is measured from, if any."""
        return self.anchors[j] if j < len(self.anchors) else None

    def anchor_event(self, j: int) -> str:
        """Which event of its anchor's call slot ``j``'s gap is measured from: ``"start"`` or
        ``"end"``, the name of that :class:`~tacit.model.spans.SpanTable` column."""
        ends = self.anchor(j) is not None and j < len(self.anchor_ends) and self.anchor_ends[j]
        return "end" if ends else "start"

    @property
    def order(self) -> list[int]:
        """A topological order of the slots, each after its anchor (raises
        :class:`ConfigError` on a cycle)."""
        done: list[int] = []
        seen: set[int] = set()
        while len(done) < len(self.slots):
            progressed = False
            for j in range(len(self.slots)):
                a = self.anchor(j)
                if (
                    j not in seen
                    and all(p in seen for p in self.preds[j])
                    and (a is None or a in seen)
                ):
                    done.append(j)
                    seen.add(j)
                    progressed = True
            if not progressed:
                raise ConfigError(f"call graph {self.describe()} has a cycle")
        return done

    def sinks(self) -> list[int]:
        """The slots no other slot waits for: the response follows the last of them."""
        waited = {q for p in self.preds for q in p}
        return [j for j in range(len(self.slots)) if j not in waited]

    def is_sequential(self) -> bool:
        """True when the calls form one chain (no two run in parallel)."""
        order = self.order
        return all(self.preds[b] == [a] for a, b in pairwise(order))

    def describe(self) -> str:
        return "[" + ", ".join(f"{s.service} {s.endpoint}" for s in self.slots) + "]"


@dataclass(frozen=True)
class Join:
    """A join: one request reaches the service ``size`` times (from different callers) and only
    one of those calls, the trigger, calls onward, on behalf of all of them. ``after_others``:
    the share of the test requests in which the onward calls began after the other calls of
    the request had all been answered (they wait for the whole group)."""

    size: int
    after_others: float = 0.5


JOIN_AGREEMENT = 0.95
"""Share of the test requests' groups in which exactly one call must call onward for the
service to be learned as a join."""
JOIN_MIN_GROUPS = 5
"""Fewest such groups from which a join is learned."""
ANCHOR_MIN_REQUESTS = 10
"""Fewest test requests making both calls from which a gap between siblings is learned
(:func:`_anchors`)."""
ORDER_AGREEMENT = 0.95
"""Share of the test calls that could have left out of their triggers' order and did not, below
which an endpoint is learned to reorder (:func:`reorders`)."""
ORDER_MIN_PAIRS = 20
"""Fewest such calls (pairs) from which reordering is learned."""
ORDER_WINDOW = 64
"""Later calls, in trigger order, that each call is compared with."""
THREAD_AGREEMENT = 0.99
"""Share of an endpoint's test calls on their request's thread for it to be learned as
thread-per-request."""


@dataclass
class EndpointGraph(CallPath):
    """The calls one (service, endpoint) makes: the union graph (``slots``, ``preds``, each slot
    with the probability that a request makes it), the distinct ``paths`` requests took, and the
    ``join`` its service takes part in, if any."""

    service: str = ""
    endpoint: str = ""
    paths: list[CallPath] = field(default_factory=list)
    join: Join | None = None
    same_thread: bool = False
    """Every call is made on the thread that handles the request (thread-per-request code):
    where the spans record threads, a call goes only to a request of its own thread."""
    reorders: bool = False
    """The test requests show calls leaving out of their triggers' order (:func:`reorders`):
    TraceWeaver's arrival-order term does not apply to this endpoint."""
    support: dict[str, int] | None = None
    """What a call graph learned without test traces rests on (:mod:`.blind_callgraph`): the
    requests ``seen`` of the endpoint, and those known ``alone`` or by their ``given``
    context; None for one learned from test traces."""

    def describe(self) -> str:
        return f"of {self.service} {self.endpoint}"

    def call_paths(self) -> list[CallPath]:
        """The paths, or the union graph as the one path when none were learned or given."""
        return self.paths or [self]


@dataclass
class CallGraph:
    """Endpoint graphs keyed by (service, endpoint)."""

    endpoints: dict[tuple[str, str], EndpointGraph]

    def get(self, service: str, endpoint: str) -> EndpointGraph | None:
        return self.endpoints.get((service, endpoint))

    def without_anchors(self) -> CallGraph:
        """A copy whose gaps are all measured from their triggers (the paper's §4.1)."""
        return CallGraph(
            {
                key: replace(
                    g,
                    anchors=[],
                    anchor_ends=[],
                    paths=[replace(p, anchors=[], anchor_ends=[]) for p in g.paths],
                )
                for key, g in self.endpoints.items()
            }
        )

    def without_order(self) -> CallGraph:
        """A copy whose calls wait for none of the others and are timed from their triggers:
        nothing of the invocation order constrains a mapping (the first component TraceWeaver
        §6.2.5's ablation removes)."""

        def free(path: CallPath) -> dict:
            return {"preds": [[] for _ in path.slots], "anchors": [], "anchor_ends": []}

        return CallGraph(
            {
                key: replace(g, **free(g), paths=[replace(p, **free(p)) for p in g.paths])
                for key, g in self.endpoints.items()
            }
        )

    def to_yaml(self) -> str:
        doc: dict = {}
        for (svc, ep), g in sorted(self.endpoints.items()):
            spec: dict = {"requests": g.requests, "calls": _calls_doc(g, with_probability=True)}
            if g.join:
                spec["join"] = {"size": g.join.size, "after_others": g.join.after_others}
            if g.same_thread:
                spec["same_thread"] = True
            if g.reorders:
                spec["reorders"] = True
            if g.support is not None:
                spec["support"] = dict(g.support)
            if g.paths:
                spec["paths"] = [
                    {"requests": p.requests, "calls": _calls_doc(p, with_probability=False)}
                    | ({"role": p.role} if p.role else {})
                    for p in g.paths
                ]
            doc.setdefault(svc, {})[ep] = spec
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)

    def save(self, path: str | Path) -> None:
        write_bytes(path, self.to_yaml().encode())

    @classmethod
    def load(cls, path: str | Path) -> CallGraph:
        """Read a call graph file (the form :meth:`to_yaml` writes)."""
        return cls.parse(read_yaml(path), str(path))

    @classmethod
    def from_yaml(cls, text: str, where: str) -> CallGraph:
        """The call graph :meth:`to_yaml` wrote as ``text`` (``where`` names it in errors)."""
        return cls.parse(parse_yaml(text.encode(), where), where)

    @classmethod
    def parse(cls, doc: object, path: str) -> CallGraph:
        """The call graph of a YAML document read from ``path``."""
        if not isinstance(doc, dict):
            raise ConfigError(f"{path}: a call graph is a mapping service -> endpoint -> calls")
        graphs = {}
        for svc, eps in doc.items():
            if not isinstance(eps or {}, dict):
                raise ConfigError(f"{path}: {svc}: expected a mapping endpoint -> calls")
            for ep, spec in (eps or {}).items():
                where = f"{path}: {svc} {ep}"
                spec = spec or {}
                if not isinstance(spec, dict):
                    raise ConfigError(f"{where}: expected a mapping with 'calls'")
                union = _parse_calls(spec, where)
                paths = spec.get("paths", [])
                if not isinstance(paths, list) or not all(isinstance(p, dict) for p in paths):
                    raise ConfigError(f"{where}: 'paths' must be a list of mappings")
                g = EndpointGraph(
                    union.slots,
                    union.preds,
                    number(spec, "requests", where, 0, integer=True),
                    anchors=union.anchors,
                    anchor_ends=union.anchor_ends,
                    service=str(svc),
                    endpoint=str(ep),
                    paths=[
                        _parse_calls(
                            p, f"{where} path {i}", number(p, "requests", where, 0, integer=True)
                        )
                        for i, p in enumerate(paths)
                    ],
                    join=_parse_join(spec.get("join"), where),
                    same_thread=flag(spec, "same_thread", where),
                    reorders=flag(spec, "reorders", where),
                    support=_parse_support(spec.get("support"), where),
                )
                for p in g.call_paths():
                    p.order  # noqa: B018 - validates acyclicity
                graphs[(str(svc), str(ep))] = g
        return cls(graphs)


def _calls_doc(p: CallPath, with_probability: bool) -> list[dict]:
    out = []
    for j, s in enumerate(p.slots):
        call: dict = {"id": j, "service": s.service, "endpoint": s.endpoint, "after": p.preds[j]}
        if with_probability:
            call["probability"] = round(s.probability, 6)
        if s.early_ns:
            call["early_us"] = s.early_ns / 1000
        if s.late_ns:
            call["late_us"] = s.late_ns / 1000
        if p.anchor(j) is not None:
            call[f"from_{p.anchor_event(j)}_of"] = p.anchor(j)
        out.append(call)
    return out


def _nanoseconds(call: dict, key: str, where: str) -> int:
    """A tolerance given in microseconds, in nanoseconds (at most 1e12 us: int64 holds it)."""
    return round(number(call, key, where, 0, maximum=1e12) * 1000)


def _parse_support(spec: object, where: str) -> dict[str, int] | None:
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: 'support' must be a mapping of counts")
    return {str(k): number(spec, k, where, integer=True) for k in spec}


def _parse_join(spec: object, where: str) -> Join | None:
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: 'join' must be {{size: N, after_others: P}}")
    size = number(spec, "size", where, integer=True)
    if size < 2:
        raise ConfigError(f"{where}: a join has a 'size' of at least 2, got {size}")
    return Join(size, float(number(spec, "after_others", where, 0.5, maximum=1.0)))


def _parse_calls(spec: dict, where: str, requests: int = 0) -> CallPath:  # noqa: C901
    calls = spec.get("calls", [])
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise ConfigError(f"{where}: 'calls' must be a list of mappings")
    position: dict[float | str, int] = {}  # call id -> its first call's position
    for j, c in enumerate(calls):
        call_id = c.get("id", j)
        if not isinstance(call_id, int | float | str):
            raise ConfigError(f"{where}: a call's 'id' must be a number or a string")
        position.setdefault(call_id, j)
    slots, preds, anchors, ends = [], [], [], []
    seen: dict[tuple[str, str], int] = {}
    for c in calls:
        if "service" not in c or "endpoint" not in c:
            raise ConfigError(f"{where}: every call needs service and endpoint")
        key = (str(c["service"]), str(c["endpoint"]))
        occ = seen.get(key, 0)
        seen[key] = occ + 1
        probability = float(number(c, "probability", where, 1.0, maximum=1.0))
        early, late = (_nanoseconds(c, k, where) for k in ("early_us", "late_us"))
        slots.append(Slot(*key, occ, probability, early, late))
        after = c.get("after", [])
        if not isinstance(after, list):
            raise ConfigError(f"{where}: 'after' must be a list of call ids")
        if "from_start_of" in c and "from_end_of" in c:
            raise ConfigError(f"{where}: a call has 'from_start_of' or 'from_end_of', not both")
        ends.append("from_end_of" in c)
        try:
            preds.append([position[a] for a in after])
            anchor = c.get("from_end_of" if ends[-1] else "from_start_of")
            anchors.append(None if anchor is None else position[anchor])
        except (KeyError, TypeError):
            raise ConfigError(
                f"{where}: 'after', 'from_start_of' or 'from_end_of' names an unknown call id"
            ) from None
        if anchors[-1] == len(slots) - 1:
            raise ConfigError(f"{where}: a call's gap cannot be measured from itself")
    role = spec.get("role")
    if role not in (None, "trigger", "member"):
        raise ConfigError(f"{where}: 'role' must be trigger or member, got {role!r}")
    return CallPath(slots, preds, requests, role, anchors, ends)


def learn_callgraph(spans: SpanTable) -> CallGraph:
    """Learn call graphs from observed spans with ground truth (``parent`` of client spans).

    Each server span is one request of its (service, endpoint); its true children are its calls.
    Occurrences of the same backend are numbered in start order. §5.2.2: orderings violated by
    any request that makes both calls are eliminated, over all requests for the union graph and
    over the requests of each path for the paths. Raises :class:`ConfigError` when there are
    calls but none carries its parent (blind spans: nothing to learn from).
    """
    s = spans.strings
    servers = np.flatnonzero(spans.kind == SERVER)
    clients = np.flatnonzero((spans.kind == CLIENT) & (spans.parent != NONE))
    if not len(clients) and (spans.kind == CLIENT).any():
        raise ConfigError(
            "no call carries its parent: blind spans hold no ground truth to learn a call graph "
            "from; give test traces, or a call graph file (--callgraph; see 'tacit callgraph')"
        )
    clients = clients[np.lexsort((spans.end[clients], spans.start[clients]))]
    children: dict[int, list[int]] = {}
    for c in clients:
        children.setdefault(int(spans.parent[c]), []).append(int(c))
    by_endpoint: dict[tuple[int, int], list[int]] = {}
    for r in servers:
        by_endpoint.setdefault((int(spans.service[r]), int(spans.endpoint[r])), []).append(int(r))
    joins, roles = _learn_joins(spans, servers, children)
    graphs = {}
    for (svc, ep), reqs in by_endpoint.items():
        g = _learn_endpoint(spans, s, reqs, children, roles)
        g.service, g.endpoint = s[svc] or "?", s[ep] or "?"
        g.join = joins.get(svc)
        graphs[(g.service, g.endpoint)] = g
    return CallGraph(graphs)


def _learn_joins(
    spans: SpanTable, servers: np.ndarray, children: dict[int, list[int]]
) -> tuple[dict[int, Join], dict[int, str]]:
    """Joins per service code, and the role of each request of a join.

    A service is a join when one request reaches an instance of it several times and, in at
    least :data:`JOIN_AGREEMENT` of such groups of the test requests, exactly one of them makes
    calls. Media Microservices' compose-review-service receives five calls per request and calls
    onward from one of them (the last to finish storing its part, not always the last to
    arrive), so the trigger is learned as a role, not a rule.
    """
    groups: dict[tuple[int, int, int], list[int]] = {}
    for r in servers.tolist():
        key = (int(spans.trace[r]), int(spans.service[r]), int(spans.instance[r]))
        groups.setdefault(key, []).append(r)
    tally: dict[int, list[int]] = {}  # groups, groups with one caller, of them waiting ones
    sizes: dict[int, list[int]] = {}
    for (_, svc, _), members in groups.items():
        calling = [r for r in members if children.get(r)]
        if len(members) >= 2 and calling:
            t = tally.setdefault(svc, [0, 0, 0])
            t[0] += 1
            t[1] += len(calling) == 1
            sizes.setdefault(svc, []).append(len(members))
            if len(calling) == 1:
                first = min(spans.start[c] for c in children[calling[0]])
                t[2] += all(spans.end[r] <= first for r in members if r != calling[0])
    joins = {
        svc: Join(int(np.bincount(sizes[svc]).argmax()), round(waiting / single, 6))
        for svc, (n, single, waiting) in tally.items()
        if n >= JOIN_MIN_GROUPS and single >= JOIN_AGREEMENT * n
    }
    roles: dict[int, str] = {}
    for (_, svc, _), members in groups.items():
        if svc in joins and len(members) >= 2:
            for r in members:
                roles[r] = "trigger" if children.get(r) else "member"
    return joins, roles


def _learn_endpoint(
    spans: SpanTable,
    s: StringPool,
    reqs: list[int],
    children: dict[int, list[int]],
    roles: dict[int, str],
) -> EndpointGraph:
    tolerance = _tolerances(spans, reqs, children)
    union = _learn_path(spans, s, reqs, children, tolerance)
    by_path: dict[tuple, list[int]] = {}
    for r in reqs:
        kids = children.get(r, [])
        callees = zip(spans.peer[kids].tolist(), spans.endpoint[kids].tolist(), strict=True)
        signature = (roles.get(r, ""), *sorted(callees))
        by_path.setdefault(signature, []).append(r)
    paths = []
    for signature, members in sorted(by_path.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        path = _learn_path(spans, s, members, children, tolerance)
        path.role = str(signature[0]) or None
        paths.append(path)
    pairs = [(spans.thread[r], spans.thread[c]) for r in reqs for c in children.get(r, [])]
    known = [(a, b) for a, b in pairs if a != NONE and b != NONE]
    same = bool(known) and sum(a == b for a, b in known) >= THREAD_AGREEMENT * len(known)
    return EndpointGraph(
        union.slots,
        union.preds,
        len(reqs),
        anchors=union.anchors,
        anchor_ends=union.anchor_ends,
        paths=paths,
        same_thread=same,
        reorders=reorders(spans, reqs, children, union),
    )


def reorders(
    spans: SpanTable,
    reqs: list[int],
    children: dict[int, list[int]],
    union: CallPath,
) -> bool:
    """Whether the requests ``reqs`` (their calls ``children``) show the endpoint's calls
    leaving out of the order of their triggers (the request's arrival, or the end of the calls
    ``union`` says they wait for).

    A pair of calls to one backend from one instance could have swapped when the second
    call's trigger came before the first call started. An event loop keeps such pairs in
    order (the Node.js app); a thread pool or an asynchronous client does not
    (HotelReservation's front end, Media Microservices' services, Nezha OnlineBoutique's).
    The endpoint reorders when fewer than :data:`ORDER_AGREEMENT`
    of at least :data:`ORDER_MIN_PAIRS` such pairs kept order; with fewer pairs there is no
    evidence that it does.
    """
    s = spans.strings
    slot_at = {(x.service, x.endpoint, x.occurrence): j for j, x in enumerate(union.slots)}
    calls: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for r in reqs:
        occ: dict[tuple[int, int], int] = {}
        placed: dict[int, int] = {}
        for c in children.get(r, []):
            key = (int(spans.peer[c]), int(spans.endpoint[c]))
            k = occ[key] = occ.get(key, -1) + 1
            j = slot_at.get((s[key[0]] or "?", s[key[1]] or "?", k))
            if j is not None:
                placed[j] = c
        for j, c in placed.items():
            ready = max(
                [int(spans.start[r])]
                + [int(spans.end[placed[q]]) for q in union.preds[j] if q in placed]
            )
            key3 = (int(spans.instance[r]), int(spans.peer[c]), int(spans.endpoint[c]))
            calls.setdefault(key3, []).append((ready, int(spans.start[c])))
    pairs = kept = 0
    for v in calls.values():
        a = np.array(sorted(v), dtype=np.int64)
        trigger, start = a[:, 0], a[:, 1]
        for offset in range(1, min(len(a), ORDER_WINDOW + 1)):
            could_swap = trigger[offset:] < start[:-offset]
            pairs += int(could_swap.sum())
            kept += int((could_swap & (start[:-offset] < start[offset:])).sum())
    return pairs >= ORDER_MIN_PAIRS and kept < ORDER_AGREEMENT * pairs


def _tolerances(
    spans: SpanTable, reqs: list[int], children: dict[int, list[int]]
) -> dict[tuple[int, int], tuple[int, int]]:
    """Per callee (peer, endpoint): how early a call started before its request and how late
    it ended after it, at most, times :data:`TOLERANCE_MARGIN` (0 when never)."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for r in reqs:
        for c in children.get(r, []):
            key = (int(spans.peer[c]), int(spans.endpoint[c]))
            early = max(0, int(spans.start[r] - spans.start[c]))
            late = max(0, int(spans.end[c] - spans.end[r]))
            e0, l0 = out.get(key, (0, 0))
            out[key] = (max(e0, early), max(l0, late))
    return {
        k: (round(TOLERANCE_MARGIN * e), round(TOLERANCE_MARGIN * la)) for k, (e, la) in out.items()
    }


def _slot_calls(
    spans: SpanTable, reqs: list[int], children: dict[int, list[int]]
) -> tuple[dict[tuple[int, int, int], int], list[dict[int, int]]]:
    """The slots of ``reqs``' calls, numbered by first appearance: ``(peer, endpoint,
    occurrence) → slot``, and per request ``slot → call row`` (occurrences count a request's
    calls to one backend in start order)."""
    slot_ids: dict[tuple[int, int, int], int] = {}
    rows_per_req: list[dict[int, int]] = []
    for r in reqs:
        occ: dict[tuple[int, int], int] = {}
        placed = {}
        for c in children.get(r, []):
            key = (int(spans.peer[c]), int(spans.endpoint[c]))
            k = occ.get(key, 0)
            occ[key] = k + 1
            placed[slot_ids.setdefault((*key, k), len(slot_ids))] = c
        rows_per_req.append(placed)
    return slot_ids, rows_per_req


_SLOT_PAIR_ARRAYS = 4
"""Slot × slot arrays learning a path's order holds at once, in float64's size: the violated
and together masks, the order and the product of the transitive reduction."""
_SLOT_PAIR_CHUNK = 1 << 24
"""Request × slot × slot cells compared at once when ordering slots (16 MiB of each mask)."""


def _learn_path(
    spans: SpanTable,
    s: StringPool,
    reqs: list[int],
    children: dict[int, list[int]],
    tolerance: dict[tuple[int, int], tuple[int, int]],
) -> CallPath:
    slot_ids, rows_per_req = _slot_calls(spans, reqs, children)
    n = len(slot_ids)
    what = f"learning the call graph's timing: 2 × {len(reqs)} requests × {n} call slots"
    check_allocation((2, len(reqs), n), np.float64, what, spans.sources)
    what = f"ordering {n} call slots: {_SLOT_PAIR_ARRAYS} × {n} × {n} slot pairs"
    check_allocation((_SLOT_PAIR_ARRAYS, n, n), np.float64, what, spans.sources)
    start = np.full((len(reqs), n), np.nan)
    end = np.full((len(reqs), n), np.nan)
    for i, (r, placed) in enumerate(zip(reqs, rows_per_req, strict=True)):
        for j, c in placed.items():  # relative to the request: float64 keeps nanoseconds
            start[i, j] = spans.start[c] - spans.start[r]
            end[i, j] = spans.end[c] - spans.start[r]
    present = ~np.isnan(start)
    violated, together = np.zeros((n, n), bool), np.zeros((n, n), bool)
    step = max(1, _SLOT_PAIR_CHUNK // max(1, n * n))  # requests compared at once
    for k in range(0, len(reqs), step):
        both = present[k : k + step, :, None] & present[k : k + step, None, :]
        violated |= ((end[k : k + step, :, None] > start[k : k + step, None, :]) & both).any(0)
        together |= both.any(axis=0)
    before = ~violated & together
    np.fill_diagonal(before, False)
    before &= ~before.T  # zero-length calls at one instant order both ways: keep neither
    # Transitive reduction: drop a -> b when a -> m -> b for some m (a count of paths of
    # length two: exact in float64 below 2^53, and done by BLAS).
    implied = (before.astype(np.float64) @ before.astype(np.float64)) > 0
    immediate = before & ~implied
    probability = present.mean(axis=0) if len(reqs) else np.ones(n)
    slots = [
        Slot(s[peer] or "?", s[ep] or "?", k, float(probability[j]), *tolerance[(peer, ep)])
        for (peer, ep, k), j in sorted(slot_ids.items(), key=lambda kv: kv[1])
    ]
    preds = [sorted(np.flatnonzero(immediate[:, j]).tolist()) for j in range(n)]
    path = CallPath(slots, preds, len(reqs))
    path.anchors, path.anchor_ends = _anchors(path, start, end)
    return path


def _anchors(
    path: CallPath, start: np.ndarray, end: np.ndarray
) -> tuple[list[int | None], list[bool]]:
    """Per slot, the sibling whose call its gap is best measured from, and whether from that
    call's end rather than its start, learned from the test requests (a tacit extension of
    §4.1's gaps).

    TraceWeaver measures every gap from the call's trigger: the end of its predecessors, or the
    request's arrival. Calls that run in parallel are often launched together (an asynchronous
    fan-out) after work of varying length: Media Microservices' compose-review-service calls
    three services at once, a varying time after the request that completes its join arrived.
    Then the gap from a sibling's start (the same predecessors, placed earlier) varies far less
    than the gap from the trigger, and it is what tells one request's fan-out from another's. A
    call may also begin just before a sibling's span closes, so that no order is learned between
    them although one follows the other: Nezha OnlineBoutique's product catalogue opens
    ``sql.rows`` just before its ``sql.conn.query`` span ends, whose length varies under load.
    Then the gap from the sibling's end varies least. A slot takes the earlier sibling, and the
    event of its call (start or end), whose gap has the smallest interquartile range over the
    test requests that made both, when that is smaller than its trigger gap's; on ties the
    start, and the earliest placed. ``start``/``end`` hold one row per request and one column per
    slot of ``path`` (which has no anchors yet), relative to the request's arrival (NaN: not
    made).
    """
    preds, n = path.preds, len(path.slots)
    ready = np.zeros_like(start)
    for j in range(n):
        for q in preds[j]:
            ready[:, j] = np.fmax(ready[:, j], end[:, q])
    anchors: list[int | None] = [None] * n
    ends = [False] * n
    placed: dict[tuple[int, ...], list[int]] = {}  # siblings placed so far, by predecessors
    for j in path.order:
        siblings = placed.setdefault(tuple(preds[j]), [])
        if siblings:  # all of them at once: a fan-out of n calls makes n² / 2 pairs
            both = ~np.isnan(start[:, [j]]) & ~np.isnan(start[:, siblings])
            trigger = _iqr(np.where(both, start[:, [j]] - ready[:, [j]], np.nan))
            # Columns: each sibling's start, then each sibling's end.
            events = np.concatenate([start[:, siblings], end[:, siblings]], axis=1)
            made = np.concatenate([both, both], axis=1)
            spread = _iqr(np.where(made, start[:, [j]] - events, np.nan))
            ok = (made.sum(axis=0) >= ANCHOR_MIN_REQUESTS) & (spread < np.tile(trigger, 2))
            if ok.any():  # the smallest spread; starts before ends, the earliest placed on ties
                best = int(np.argmin(np.where(ok, spread, np.inf)))
                anchors[j] = siblings[best % len(siblings)]
                ends[j] = best >= len(siblings)
        siblings.append(j)
    return anchors, ends


def _iqr(x: np.ndarray) -> np.ndarray:
    """Per column of ``x``, the interquartile range of its finite values (infinite with fewer
    than two): numpy's linear percentiles, computed for all columns in one sort (numpy's own
    nanpercentile loops over columns in Python)."""
    finite = np.isfinite(x)
    n = finite.sum(axis=0)
    ordered = np.sort(np.where(finite, x, np.nan), axis=0)  # NaN last
    if not len(ordered):
        return np.full(x.shape[1], np.inf)
    cols = np.arange(x.shape[1])
    q1, q3 = (_linear_quantile(ordered, n, q, cols) for q in (0.25, 0.75))
    return np.where(n >= 2, q3 - q1, np.inf)


def _linear_quantile(ordered: np.ndarray, n: np.ndarray, q: float, cols: np.ndarray) -> np.ndarray:
    """The ``q`` quantile (q < 1) of the first ``n`` values of each column of ``ordered``,
    interpolated exactly as numpy's default ("linear") method does."""
    virtual = (np.maximum(n, 1) - 1) * q
    below = np.floor(virtual).astype(np.int64)
    a, b = ordered[below, cols], ordered[np.minimum(below + 1, len(ordered) - 1), cols]
    t = virtual - below
    return np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)

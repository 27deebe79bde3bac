"""Parents for the calls a reconstruction left without one, where only one is possible.

A call TraceWeaver could not place (its candidates all lost in the joint assignment, or its
request followed a path the test traces never showed) leaves its whole trace wrong. When exactly
one request of its instance could have made it (its endpoint calls that backend, it still owes
such a call, and the call lies inside it within the learned tolerances), the call goes to that
request, marked as a fallback with the reason the algorithm gave. Where several could have, a
guess would as often break a second trace as mend the first, so the call stays unmapped. A tacit
extension; ``TraceWeaverParams.fallback`` off leaves every such call unmapped, as the paper does.
"""

from __future__ import annotations

import numpy as np

from tacit.model.roles import process_key
from tacit.model.spans import CLIENT, NONE, SERVER, SpanTable
from tacit.reconstruct.baselines import owed_calls
from tacit.reconstruct.callgraph import CallGraph
from tacit.reconstruct.candidates import call_keys
from tacit.reconstruct.result import Reconstruction
from tacit.runs import distinct


def fill_unmapped(spans: SpanTable, rec: Reconstruction, callgraph: CallGraph) -> int:
    """Give every unmapped call of ``rec`` with exactly one possible cause that parent;
    returns how many got one."""
    lost = np.array(sorted(rec.unmapped), dtype=np.int64)
    if not len(lost):
        return 0
    proc = process_key(spans)
    filled = 0
    for p in distinct(proc[lost]):
        calls = lost[proc[lost] == p]
        incoming = np.flatnonzero((proc == p) & (spans.kind == SERVER))
        incoming = incoming[np.argsort(spans.start[incoming], kind="stable")]
        longest = int((spans.end[incoming] - spans.start[incoming]).max(initial=0))
        owed, tolerance = owed_calls(spans, incoming, callgraph)
        earliest = max((e for t in tolerance for e, _ in t.values()), default=0)
        made = np.flatnonzero((proc == p) & (spans.kind == CLIENT) & (rec.parent != NONE))
        position = {int(r): i for i, r in enumerate(incoming)}
        for o, k in zip(made.tolist(), call_keys(spans, made).tolist(), strict=True):
            i = position.get(int(rec.parent[o]))
            if i is not None and k in owed[i]:
                owed[i][k] -= 1
        for o, k in zip(calls.tolist(), call_keys(spans, calls).tolist(), strict=True):
            # Requests that began before the call (or after it, by the learned tolerance), and
            # not so long before that none is still open.
            lo = np.searchsorted(spans.start[incoming], spans.start[o] - longest, "left")
            hi = np.searchsorted(spans.start[incoming], spans.start[o] + earliest, "right")
            fits = []
            for i in range(lo, hi):
                early, late = tolerance[i].get(k, (0, 0))
                r = incoming[i]
                if owed[i].get(k, 0) > 0 and (
                    spans.start[r] - early <= spans.start[o] and spans.end[o] <= spans.end[r] + late
                ):
                    fits.append(i)
            if len(fits) != 1:
                continue  # none, or a guess that could break another request's trace
            best = fits[0]
            owed[best][k] -= 1
            rec.parent[o] = incoming[best]
            rec.fallback[o] = rec.unmapped.pop(o)
            filled += 1
    return filled

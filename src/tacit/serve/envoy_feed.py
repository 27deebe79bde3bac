"""Sidecar access logs as a source of ``tacit serve``: Envoy's and Istio's access logs, one file
per sidecar, each followed as it grows (:mod:`.followed_file`), every entry made a span and the
two sides of each RPC paired as the batch commands pair them
(:mod:`tacit.formats.envoy_access_log`), then taken in like the spans of an OTLP request and
reconstructed online with them (TraceWeaver §5.1: the spans a service mesh's sidecars see).

The two sides of an RPC are written by two sidecars, each when its request ends and its log is
flushed (Envoy's ``--file-flush-interval-msec``). The entries read are paired at every poll; a
pair is taken in at once, the server span naming the client span as its parent (how
reconstruction knows the two sides of one RPC: :mod:`.online_feed`), an entry still unpaired
after ``hold_s`` of wall time alone (a request from outside the mesh, a call to a service
without a sidecar). The entries waiting are at most what the sidecars write in ``hold_s``.

A span's id is made from its file and the byte offset of its entry, and a pair's trace id from
its client span's: the same in every run. Per file, the offset of the first entry not yet taken
in is stored with each request of spans (:meth:`.ingest.Ingest.submit`), so a restart reads on
from there, and an entry taken in before and read again is a duplicate (the service remembers
the spans it stored last), not a second span.

Every line is accounted for in :meth:`EnvoyFeed.status`: entries paired or taken in alone, the
lines the reader leaves out by reason (the proxy's own log, TCP entries, unfinished requests),
and lines refused (logged with file and line). None stops the service.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tacit.errors import InputError
from tacit.formats.capture_spans import ServiceMap
from tacit.formats.envoy_access_log import (
    SUFFIXES,
    access_log_entry,
    entry_span,
    pair_sidecar_spans,
    sidecar,
)
from tacit.formats.fields import RecordReader
from tacit.formats.otlp import otlp_document
from tacit.model.span_details import SpanDetail
from tacit.model.spans import CLIENT, NONE, SpanTableBuilder
from tacit.reconstruct.shared_values import TARGET_PATH, TARGET_QUERY
from tacit.serve.followed_file import FollowedFile, Follower
from tacit.serve.ingest import Busy, Ingest

log = logging.getLogger("tacit.serve")

POLL_S = 0.5
TRANSPORT = "envoy"
REQUEST_SPANS = 2048
"""Spans per export request taken in."""


@dataclass
class _Sidecar:
    """One sidecar's log: its instance and service, and how far it was read."""

    key: str
    instance: str
    service: str
    file: FollowedFile


@dataclass
class _Entry:
    """An access log entry made a span, waiting for the other side of its RPC."""

    sidecar: _Sidecar
    offset: int
    line: int
    fields: dict[str, Any]
    ends: tuple[str | None, str | None, str | None]
    target: tuple[str, str]
    read_at: float

    @property
    def span_id(self) -> str:
        return _digest(f"{self.sidecar.key}:{self.offset}", 8)


class EnvoyFeed(Follower):
    """The sidecar logs at ``paths`` (files, or directories of them, one per sidecar, named
    by the sidecar's instance; new files in a directory are found as they appear), followed in a
    thread of their own (stopping leaves what waits for its other side to be read again by a
    restart); ``services`` names the pods (a Kubernetes pod list), as
    ``tacit reconstruct --input-format envoy --services`` does."""

    kind = "envoy"

    def __init__(
        self,
        ingest: Ingest,
        paths: tuple[Path, ...],
        services: ServiceMap | None = None,
        hold_s: float = 7.0,
    ) -> None:
        super().__init__("envoy", "the sidecar logs", POLL_S, last_poll=False)
        self.ingest = ingest
        self.paths = paths
        self.services = services or ServiceMap()
        self.hold_s = hold_s
        self.sidecars: dict[Path, _Sidecar] = {}
        self.held: list[_Entry] = []
        self.accounting: dict[str, int] = {"lines_read": 0}
        self.counts = {"paired": 0, "alone": 0, "refused": 0, "spans": 0}

    def status(self) -> dict[str, object]:
        return {
            "sources": [str(p) for p in self.paths],
            "sidecars": len(self.sidecars),
            "waiting": len(self.held),
            **self.counts,
            **self.accounting,
            "error": self.error,
        }

    def poll(self, now: float | None = None) -> None:
        """Read what every log gained, and take in what is paired or waited long enough."""
        for sc in self._found():
            try:
                read = sc.file.read()
            except FileNotFoundError:
                continue  # rotated away: its next file is found by name
            if read is not None:
                for number, offset, text in read.lines:
                    self._read(sc, number, offset, text)
                sc.file.took(read)
        self._take(time.monotonic() if now is None else now)

    def _found(self) -> list[_Sidecar]:
        """The sidecars, those whose log appeared in a directory since the last poll too."""
        for path in self._files():
            if path not in self.sidecars:
                instance, service = sidecar(path, self.services)
                key = f"envoy:{path.resolve()}"
                offset = self.ingest.store.state(key, 0)
                self.sidecars[path] = _Sidecar(key, instance, service, FollowedFile(path, offset))
        return list(self.sidecars.values())

    def _files(self) -> list[Path]:
        out = []
        for p in self.paths:
            if p.is_dir():
                out += sorted(f for f in p.iterdir() if f.name.endswith(SUFFIXES) and f.is_file())
            elif p.exists():
                out.append(p)
        return out

    def _read(self, sc: _Sidecar, number: int, offset: int, text: str | InputError) -> None:
        r = RecordReader(str(sc.file.path), f"line {number}")
        try:
            if isinstance(text, InputError):
                raise r.fail(str(text))
            entry = access_log_entry(r, text, self.accounting)
            made = None if entry is None else entry_span(
                r, entry, sc.service, sc.instance, self.services, self.accounting
            )  # fmt: skip
        except InputError as e:
            self.counts["refused"] += 1
            log.warning("%s", e)
            return
        if made is None:
            return
        assert entry is not None
        path, _, query = str(entry.get("path") or "").partition("?")
        fields, ends = made
        self.held.append(_Entry(sc, offset, number, fields, ends, (path, query), time.monotonic()))

    def _take(self, now: float) -> None:
        """Pair what waits; take in the pairs and what waited ``hold_s``."""
        if not self.held:
            return
        builder = SpanTableBuilder(TRANSPORT)
        for i, e in enumerate(self.held):
            builder.add(**e.fields, record=i)
        spans = builder.build()
        pair_sidecar_spans(spans, [e.ends for e in self.held])
        link = spans.link
        due = np.array([e.read_at <= now - self.hold_s for e in self.held], dtype=bool)
        done = (link != NONE) | due
        taken = np.flatnonzero(done).tolist()
        if not taken:
            return
        parent: dict[int, int] = {}
        for i in taken:
            if link[i] != NONE and spans.kind[i] != CLIENT:
                parent[i] = int(link[i])
        kept = [e for i, e in enumerate(self.held) if not done[i]]
        if self._submit([self.held[i] for i in taken], [parent.get(i) for i in taken], kept):
            self.counts["paired"] += 2 * len(parent)
            self.counts["alone"] += len(taken) - 2 * len(parent)
            self.held = kept

    def _submit(self, entries: list[_Entry], callers: list[int | None], kept: list[_Entry]) -> bool:
        """Take in ``entries`` (each server span's caller, an index into the entries waiting,
        in ``callers``), storing how far each file is taken in given that ``kept`` still wait;
        False when stopping before all were taken."""
        first_waiting: dict[str, int] = {}
        for e in kept:
            key = e.sidecar.key
            first_waiting[key] = min(first_waiting.get(key, e.offset), e.offset)
        state = {sc.key: first_waiting.get(sc.key, sc.file.offset) for sc in self.sidecars.values()}
        held = self.held
        for a in range(0, len(entries), REQUEST_SPANS):
            part = range(a, min(a + REQUEST_SPANS, len(entries)))
            builder = SpanTableBuilder(TRANSPORT)
            for i in part:
                e, caller = entries[i], callers[i]
                client = e if caller is None else held[caller]
                builder.add(
                    **e.fields,
                    record=e.line,
                    trace=_digest(client.span_id, 16),
                    span_id=e.span_id,
                    parent_id=None if caller is None else client.span_id,
                    detail=SpanDetail(
                        e.span_id,
                        {TARGET_PATH: e.target[0], TARGET_QUERY: e.target[1]},
                    ),
                )
            body = orjson.dumps(otlp_document(builder.build()))
            last = part.stop == len(entries)
            while True:
                try:
                    self.counts["spans"] += self.ingest.submit(
                        body, "json", TRANSPORT, state if last else None
                    )
                    break
                except Busy as e:
                    if self._stop.wait(e.retry_after_s):
                        return False
        return True


def _digest(text: str, size: int) -> str:
    return hashlib.blake2b(text.encode(), digest_size=size).hexdigest()

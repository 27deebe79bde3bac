"""Every input that carries messages, behind one reader.

:func:`read_message_inputs` takes strace logs (:mod:`tacit.formats.strace`), socket-event JSON
lines (:mod:`tacit.formats.socketevents`) and message tables (:mod:`tacit.formats.messagetable`:
CSV, JSON lines, Parquet) and tells them apart by content (after gzip) or suffix. The socket-level
inputs come back as one table of events, to be reconciled into messages together
(:func:`tacit.causal_paths.inputs.read_messages`), the message tables as they are.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tacit.errors import ConfigError, InputError
from tacit.formats import messagetable, socketevents, strace
from tacit.formats.textio import expand_inputs, read_head
from tacit.model.messages import MessageTable
from tacit.model.socket_events import SocketEvents, concat_events

INPUT_FORMATS = ("auto", "strace", "events", "table")
SUFFIXES = tuple(
    dict.fromkeys(
        (*strace.SUFFIXES, *socketevents.SUFFIXES, *messagetable.SUFFIXES, ".log", ".log.gz")
    )
)
"""The files taken from a directory."""


def detect_message_input(path: str | Path) -> str:
    """``strace``, ``events`` (socket-event JSON lines) or ``table`` (a message table).

    A ``.strace`` or ``.parquet`` suffix decides; otherwise the content: Parquet's magic, a
    first JSON object with ``call`` and ``fd`` (events) or ``sender`` and ``receiver`` (table),
    a timestamped strace line, or a CSV header naming ``sender`` and ``receiver``.
    """
    return _detect(path)


def _detect(path: str | Path) -> str:  # noqa: C901
    name = Path(path).name.lower()
    if name.endswith(strace.SUFFIXES):
        return "strace"
    if name.endswith(".parquet"):
        return "table"
    raw = read_head(path)
    if raw.startswith(messagetable.PARQUET_MAGIC):
        return "table"
    # the head may end inside a character: decode what is whole (the reader refuses bad bytes)
    text = (
        codecs.getincrementaldecoder("utf-8")(errors="replace").decode(raw, final=False)
        if raw
        else ""
    )
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first.startswith("{"):
        try:
            head = orjson.loads(first)
        except orjson.JSONDecodeError:
            head = None
        if isinstance(head, dict):
            if {"call", "fd"} <= head.keys():
                return "events"
            if {"sender", "receiver"} <= head.keys():
                return "table"
    elif strace.looks_like_strace(text):
        return "strace"
    elif {"sender", "receiver"} <= {h.strip() for h in first.split(",")}:
        return "table"
    raise InputError(
        "unknown message input: expected an strace log, socket-event JSON lines, or a message "
        "table (CSV, JSON lines or Parquet with sender and receiver columns)",
        path=str(path),
    )


@dataclass
class MessageInputs:
    """What message inputs hold before reconciliation: the socket events of every strace log
    and event file (None: there were none), the message tables, and the accounting (``files``,
    the readers' line counts under ``input ...``, ``message table rows``)."""

    events: SocketEvents | None
    tables: list[MessageTable]
    accounting: dict[str, int]


def read_message_inputs(
    paths: str | Path | list[str | Path],
    *,
    format: str = "auto",
    host: str | None = None,
    date: Any = None,
    utc_offset_s: int = 0,
    program: str | None = None,
    names: Mapping[int, str] | None = None,
    node_per_pid: bool = False,
) -> MessageInputs:
    """Socket events and message tables from strace logs, socket-event JSON lines and message
    tables (or directories of them).

    ``format`` forces one kind for every file (:data:`INPUT_FORMATS`). ``host``, ``date``,
    ``utc_offset_s``, ``program``, ``names`` and ``node_per_pid`` go to
    :func:`~tacit.formats.strace.read_strace` (``host`` names every log given, so pass it
    only with one log, or name logs ``HOST.PID.strace``).
    """
    if format not in INPUT_FORMATS:
        raise ConfigError(f"unknown message input format {format!r}: expected {INPUT_FORMATS}")
    files = expand_inputs(paths if isinstance(paths, list) else [paths], SUFFIXES)
    event_tables = []
    tables = []
    acc: dict[str, int] = {"files": len(files)}
    for f in files:
        kind = _detect(f) if format == "auto" else format
        if kind == "strace":
            event_tables.append(
                strace.read_strace(
                    f,
                    host=host,
                    date=date,
                    utc_offset_s=utc_offset_s,
                    program=program,
                    names=names,
                    node_per_pid=node_per_pid,
                )
            )
        elif kind == "events":
            event_tables.append(
                socketevents.read_event_lines(f, host=host, node_per_pid=node_per_pid)
            )
        else:
            t = messagetable.read_message_table(f)
            acc["message_table_rows"] = acc.get("message_table_rows", 0) + len(t)
            tables.append(t)
    events = concat_events(event_tables) if event_tables else None
    if events is not None:
        for k, n in events.accounting.items():
            acc[f"input {k}"] = n
    return MessageInputs(events, tables, acc)

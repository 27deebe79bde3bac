"""Messages for causal path analysis from any input that carries them.

:func:`read_messages` reconciles the socket-level inputs (strace logs, socket-event JSON lines)
together, as WAP5 does (Reynolds et al., WWW '06, §4: the two ends of a connection are usually
in different logs), with :func:`.reconcile.reconcile`, and appends the rows of the message
tables (:func:`tacit.formats.messages_input.read_message_inputs` reads them all).
:func:`read_any_messages` also takes traces and blind spans (Jaeger, Zipkin, OTLP, CSV span
tables, blind JSON lines): each RPC becomes a request and a response, as WAP5 would see them
(:func:`.from_spans.messages_from_spans`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tacit.causal_paths.from_spans import messages_from_spans
from tacit.causal_paths.reconcile import ReconcileParams, reconcile
from tacit.errors import ConfigError, InputError
from tacit.formats import observe
from tacit.formats.messages_input import detect_message_input, read_message_inputs
from tacit.model.messages import MessageTable, concat_messages

FORMATS = ("auto", "strace", "events", "table", "spans")
"""What :func:`read_any_messages` reads: ``auto`` tells them apart."""


def read_messages(
    paths: str | Path | list[str | Path],
    *,
    params: ReconcileParams | None = None,
    **reading: Any,
) -> tuple[MessageTable, dict[str, int]]:
    """Messages from strace logs, socket-event JSON lines and message tables (or directories).

    ``reading`` holds the options of :func:`~tacit.formats.messages_input.read_message_inputs`
    (``format``, ``host``, ``date``, ...); ``params`` go to the reconciliation. The accounting
    holds ``files``, the readers' line counts under ``input ...``, the reconciliation's counts,
    ``message table rows`` and the total ``messages``.
    """
    inputs = read_message_inputs(paths, **reading)
    tables, acc = list(inputs.tables), dict(inputs.accounting)
    if inputs.events is not None:
        result = reconcile(inputs.events, params)
        acc.update(result.accounting)
        tables.insert(0, result.messages)
    messages = concat_messages(tables) if len(tables) != 1 else tables[0]
    acc["messages"] = len(messages)
    return messages, acc


def read_any_messages(
    paths: list[str | Path], format: str = "auto", host: str | None = None
) -> tuple[MessageTable, dict[str, int]]:
    """Messages and the accounting of their inputs; ``format`` forces one kind (:data:`FORMATS`).

    With ``auto`` each input is first tried as a message input; one that is none of those is
    read as traces or spans.
    """
    if format not in FORMATS:
        raise ConfigError(f"unknown input format {format!r}: expected one of {', '.join(FORMATS)}")
    if format == "auto":
        try:
            for p in paths:
                if Path(p).is_file():
                    detect_message_input(p)
        except InputError:
            format = "spans"
    if format != "spans":
        return read_messages(list(paths), format=format, host=host)
    observed, _ = observe(list(paths))
    derived = messages_from_spans(observed.spans, with_truth=False)
    accounting = {f"spans_{k}": v for k, v in observed.accounting.items()}
    accounting["messages"] = len(derived.messages)
    return derived.messages, accounting

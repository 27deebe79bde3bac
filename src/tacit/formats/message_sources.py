"""Messages for causal path analysis from any input: message inputs, or traces and spans.

Socket logs and message tables are read by :func:`tacit.formats.messages_input.read_messages`;
traces and blind spans (Jaeger, Zipkin, OTLP, CSV span tables, blind JSON lines) become messages
as WAP5 would see them, each RPC a request and a response
(:func:`tacit.causal_paths.from_spans.messages_from_spans`).
"""

from __future__ import annotations

from pathlib import Path

from tacit.errors import ConfigError, InputError
from tacit.model.messages import MessageTable

FORMATS = ("auto", "strace", "events", "table", "spans")


def read_any_messages(
    paths: list[str | Path], format: str = "auto", host: str | None = None
) -> tuple[MessageTable, dict[str, int]]:
    """Messages and the accounting of their inputs; ``format`` forces one kind (:data:`FORMATS`).

    With ``auto`` each input is first tried as a message input; one that is none of those is
    read as traces or spans.
    """
    from tacit.formats.messages_input import detect_message_input, read_messages

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
    from tacit.causal_paths.from_spans import messages_from_spans
    from tacit.reconstruct.pipeline import observe

    observed, _ = observe(list(paths))
    derived = messages_from_spans(observed.spans, with_truth=False)
    accounting = {f"spans: {k}": v for k, v in observed.accounting.items()}
    accounting["messages (a request and a response per RPC)"] = len(derived.messages)
    return derived.messages, accounting

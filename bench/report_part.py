"""The one way the reproduction benchmarks hand a part of ``docs/reproduction.md`` over:
printed, and written to ``--markdown PATH`` when given (``make reproduce`` gathers the parts)."""

from __future__ import annotations

import json
from pathlib import Path


def publish(text: str, path: Path | None, echo: bool = True) -> None:
    """Print ``text`` (unless ``echo`` is false) and write it to ``path`` when there is one."""
    if echo:
        print(text)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def not_run(benchmark: str, heading: str, reason: str, path: Path | None) -> None:
    """Say that a reproduction did not run, and why: a JSON line, and its part of the report
    (under ``heading``)."""
    print(json.dumps({"benchmark": benchmark, "skipped": reason}))
    publish(f"{heading}\n\nNot run: {reason}.\n", path, echo=False)

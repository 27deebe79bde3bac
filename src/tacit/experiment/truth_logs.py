"""The ground truth of an experiment's services, each of which logs what it did as JSON lines
of its own (a process cannot append to a shared file without interleaving its lines)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tacit.outputs import write_bytes


def merge_logs(logs: Path, out: Path) -> list[dict[str, Any]]:
    """Every line of the ``*.jsonl`` logs in ``logs``, ordered by ``start_ns``, written to
    ``out`` as JSON lines; returns them."""
    rows = [
        json.loads(line)
        for log in sorted(logs.glob("*.jsonl"))
        for line in log.read_text().splitlines()
        if line.strip()
    ]
    rows.sort(key=lambda r: r["start_ns"])
    write_bytes(out, "".join(json.dumps(r) + "\n" for r in rows).encode())
    return rows

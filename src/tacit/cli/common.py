"""What every command shares: the consoles, ``--json`` output, progress, and option parsing."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tacit.errors import ConfigError

console = Console(stderr=True)
"""Messages, tables and progress for people: stderr."""
out = Console()
"""Results: stdout."""

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]

UNITS_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
MAX_NS = 2**63 - 1


def finite(x: Any) -> Any:
    """``x`` with every non-finite float replaced by None, through dicts, lists and tuples."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return x


def print_json(doc: Any) -> None:
    """``doc`` as valid JSON on stdout: NaN and infinities become null."""
    out.print_json(json.dumps(finite(doc)))


@contextmanager
def progress_bar(total: int, label: str, enabled: bool) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr advanced by a callback taking a count (quiet if disabled)."""
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn(label),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as p:
        task = p.add_task(label, total=total)
        yield lambda n: p.advance(task, n)


def comma_list(text: str) -> list[str]:
    """The items of a comma-separated option, stripped, empty ones dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_duration(text: str) -> int:
    """``5s``, ``250ms``, ``100us``, ``10ns`` or plain seconds → nanoseconds (finite, not
    negative, at most what int64 nanoseconds hold: about 292 years)."""
    t = text.strip().lower()
    for unit in sorted(UNITS_NS, key=len, reverse=True):
        if t.endswith(unit):
            number, scale = t[: -len(unit)], UNITS_NS[unit]
            break
    else:
        number, scale = t, UNITS_NS["s"]
    try:
        value = float(number)
    except ValueError:
        raise ConfigError(f"not a duration: {text!r} (e.g. 5s, 250ms)") from None
    if not math.isfinite(value):
        raise ConfigError(f"a duration must be a finite number: {text!r}")
    if value < 0:
        raise ConfigError(f"a duration cannot be negative: {text!r}")
    if value * scale > MAX_NS:
        raise ConfigError(f"a duration longer than 292 years: {text!r}")
    return round(value * scale)

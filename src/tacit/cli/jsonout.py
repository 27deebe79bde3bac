"""``--json`` output: valid JSON (NaN and infinities become null) on stdout."""

from __future__ import annotations

import json
import math
from typing import Any

from tacit.cli.traces import out


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
    out.print_json(json.dumps(finite(doc)))

"""Checked fields of a YAML configuration (an application spec, a call graph file).

Each reader takes a mapping, a key and ``where`` (what to name in the error) and returns the
value or raises :class:`~tacit.errors.ConfigError` saying which field is wrong and why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tacit.errors import ConfigError

REQUIRED: Any = object()
"""The default of a field that must be given."""


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader, compiled (libyaml) where PyYAML was built with it: several times faster
than the pure-Python one on a large call graph, same documents."""


MAX_NESTING = 64
"""The deepest nesting of lists and mappings a YAML (or JSON) document may have: building a
deeper one recurses once per level, which overflows the C stack of libyaml's composer (a
crash, not an error) and Python's recursion limit in the pure-Python one. tacit's own files
nest 8 deep."""


def parse_yaml(text: str | bytes, source: str) -> Any:
    """The YAML document in ``text`` (the content of ``source``): bytes that are not UTF-8,
    syntax errors and nesting deeper than :data:`MAX_NESTING` raise one line naming
    ``source`` and the line, never the parser's several-line excerpt. The nesting is checked
    on the parser's events first (a small part of the time of loading)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{source}: not UTF-8 text (byte {e.start})") from None
    try:
        depth = 0
        for event in yaml.parse(text, Loader=_SAFE_LOADER):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_NESTING:
                    line = event.start_mark.line + 1
                    raise ConfigError(
                        f"{source}: lists and mappings nested deeper than {MAX_NESTING} "
                        f"levels at line {line}"
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{source}: invalid YAML{where}: {problem}") from None


def read_yaml(path: str | Path) -> Any:
    """The YAML document in the file ``path`` (errors as in :func:`parse_yaml`)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    return parse_yaml(data, str(path))


def fields(value: Any, where: str, allowed: tuple[str, ...]) -> Mapping[Any, Any]:
    """``value`` as a mapping with no field outside ``allowed`` (typos must not pass silently)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    unknown = [str(k) for k in value if k not in allowed]
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(allowed)})"
        )
    return value


def get(data: Mapping[Any, Any], key: str, where: str, default: Any = REQUIRED) -> Any:
    """The field, or ``default`` when it is absent (an error when that is :data:`REQUIRED`)."""
    if key in data:
        return data[key]
    if default is REQUIRED:
        raise ConfigError(f"{where}: missing field '{key}'")
    return default


def text(data: Mapping[Any, Any], key: str, where: str) -> str:
    """A non-empty string."""
    value = get(data, key, where)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: field '{key}' must be a non-empty string, got {value!r}")
    return value


def number(
    data: Mapping[Any, Any],
    key: str,
    where: str,
    default: Any = REQUIRED,
    *,
    positive: bool = False,
    maximum: float = math.inf,
    integer: bool = False,
) -> Any:
    """A finite number >= 0 (> 0 if ``positive``, <= ``maximum``), an int if ``integer``."""
    value = get(data, key, where, default)
    kinds = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{where}: field '{key}' must be {kind}, got {value!r}")
    if value < 0 or (positive and value == 0) or value > maximum:
        bound = "> 0" if positive else ">= 0"
        if maximum < math.inf:
            bound += f" and <= {maximum:g}"
        raise ConfigError(f"{where}: field '{key}' must be {bound}, got {value!r}")
    return value


def flag(data: Mapping[Any, Any], key: str, where: str, default: bool = False) -> bool:
    """True or false."""
    value = get(data, key, where, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: field '{key}' must be true or false, got {value!r}")
    return value


def nonempty_list(value: Any, where: str) -> list[Any]:
    """A list with at least one item."""
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: expected a non-empty list, got {value!r}")
    return value

"""Typed field access for parsed records, with errors that name file and record."""

from __future__ import annotations

from typing import Any

from tacit.errors import InputError


class RecordReader:
    """Reads fields of one input record, raising :class:`InputError` naming file and record."""

    def __init__(self, path: str, record: str | int) -> None:
        self.path = path
        self.record = record

    def fail(self, message: str) -> InputError:
        return InputError(message, path=self.path, record=self.record)

    def obj(self, value: Any, what: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(f"{what} must be an object, got {type(value).__name__}")
        return value

    def get(self, obj: dict, key: str, typ: type | tuple[type, ...], *, default: Any = ...) -> Any:
        if key not in obj or obj[key] is None:
            if default is ...:
                raise self.fail(f"missing field {key!r}")
            return default
        v = obj[key]
        if not isinstance(v, typ) or (isinstance(v, bool) and typ is not bool):
            raise self.fail(f"field {key!r} must be {_type_name(typ)}, got {type(v).__name__}")
        return v

    def integer(self, obj: dict, key: str, *, default: Any = ...) -> int:
        """An integer field; numeric strings are accepted (OTLP JSON encodes int64 as strings)."""
        v = self.get(obj, key, (int, str), default=default)
        if isinstance(v, str):
            try:
                return int(v)
            except ValueError:
                raise self.fail(f"field {key!r} must be an integer, got {v!r}") from None
        return v

    def string(self, obj: dict, key: str, *, default: Any = ...) -> str:
        return self.get(obj, key, str, default=default)


def _type_name(typ: type | tuple[type, ...]) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return typ.__name__

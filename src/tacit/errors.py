"""One exception hierarchy for tacit.

The CLI turns every :class:`TacitError` into one line on stderr and exit code 2; anything
else is a bug and shows a traceback.
"""

from __future__ import annotations


class TacitError(Exception):
    """Base of every error tacit raises on purpose."""


class InputError(TacitError):
    """Malformed or inconsistent input, named by file and record.

    ``str()`` gives ``FILE: record R: MESSAGE`` so that the CLI can print it as is.
    """

    def __init__(self, message: str, *, path: str | None = None, record: str | int | None = None):
        self.path = path
        self.record = record
        self.message = message
        where = []
        if path is not None:
            where.append(str(path))
        if record is not None:
            where.append(f"record {record}")
        super().__init__(": ".join([*where, message]))


class ConfigError(TacitError):
    """Bad parameters or a bad call graph file."""


class OutputError(TacitError):
    """An output file that could not be written; ``str()`` gives ``FILE: MESSAGE``."""

    def __init__(self, message: str, *, path: str):
        self.path = path
        super().__init__(f"{path}: {message}")

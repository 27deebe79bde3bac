"""The service's log: one line per event on stderr, as text or as JSON objects (``json_logs``)
for a log pipeline; INFO and above unless the configuration's ``log_level`` says otherwise."""

from __future__ import annotations

import json
import logging
import sys
import time


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def configure_logging(json_logs: bool, level: str = "info") -> None:
    """Send ``tacit.serve``'s records of ``level`` and above to stderr (only there: not also to
    the command line's notices)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter()
        if json_logs
        else logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S")
    )
    log = logging.getLogger("tacit.serve")
    log.handlers[:] = [handler]
    log.setLevel(level.upper())
    log.propagate = False

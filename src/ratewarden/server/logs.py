"""The log lines of ``ratewarden serve``: one per record on stderr, JSON or text.

``configure_logging(level, fmt)`` sends the ``ratewarden`` loggers' records to
stderr with their ``extra`` fields: a JSON object a line (``fmt="json"``), or
the message then ``key=value`` pairs (``"text"``); with ``--workers`` each line
names its worker. uvicorn's error logger (the HTTP port's server, which
``server/http.py`` keeps at ERROR) writes through the same handler, so its rare
lines are in the same format.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

__all__ = ["LOGGERS", "configure_logging"]


#: The loggers ``ratewarden serve`` writes: its own, and uvicorn's errors.
LOGGERS = ("ratewarden", "uvicorn.error")

_STANDARD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message"}


class _StructuredFormatter(logging.Formatter):
    """A line with the record's ``extra`` fields: a JSON object, or text then key=value pairs."""

    def __init__(self, fmt: str, worker: int | None) -> None:
        super().__init__()
        self._json = fmt == "json"
        self._worker = worker

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if self._worker is not None:
            entry["worker"] = self._worker
        for key, value in vars(record).items():
            if key not in _STANDARD_FIELDS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if self._json:
            return json.dumps(entry, default=str)
        head = f"{entry.pop('ts')} {entry.pop('level').upper()} {entry.pop('logger')}: "
        head += str(entry.pop("msg"))
        trace = entry.pop("exc", None)
        pairs = " ".join(f"{key}={json.dumps(value, default=str)}" for key, value in entry.items())
        return head + (f" {pairs}" if pairs else "") + (f"\n{trace}" if trace else "")


def configure_logging(level: str, fmt: str, *, worker: int | None = None) -> None:
    """Send ratewarden's logs to stderr: JSON lines (``fmt="json"``) or text with key=value."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StructuredFormatter(fmt, worker))
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.propagate = False
    logging.getLogger("ratewarden").setLevel(level.upper())

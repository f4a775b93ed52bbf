"""The log lines of ``ratewarden serve``: one per record on stderr, JSON or text.

``configure_logging(level, fmt)`` sends the ``ratewarden`` loggers' records to
stderr with their ``extra`` fields: a JSON object a line (``fmt="json"``), or
the message then ``key=value`` pairs (``"text"``); with ``--workers`` each line
names its worker. uvicorn's error logger (the HTTP port's server, which
``server/http.py`` keeps at ERROR) writes through the same handler, so its rare
lines are in the same format. So do OpenTelemetry's (``--tracing``: its exporter
logs each failed export and retry, which a collector that is down repeats every
batch), with the event ``opentelemetry`` and at most one line a minute per
message; the next says how many were held back.

grpc-core (the ``grpcio`` transport's C core) writes its own lines straight to file
descriptor 2, in absl's format, bypassing Python's logging: at its default verbosity one
for every failed TLS handshake (a client without a certificate, a wrong CA, plaintext on
the TLS port), which a port scanner or an Envoy with a stale CA repeats without bound.
``quiet_grpc_core`` keeps it to its errors (``GRPC_VERBOSITY=ERROR``) unless the
operator chose a verbosity or a trace; it must run before ``grpc`` is imported, which
reads the variable once. The handshakes it silences are not counted: grpcio offers no
hook where one fails.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import MutableMapping
from typing import Any

from ratewarden.clock import Clock
from ratewarden.metrics import LogRateLimiter

__all__ = ["GRPC_VERBOSITY", "LOGGERS", "OTEL_INTERVAL", "configure_logging", "quiet_grpc_core"]


#: The loggers ``ratewarden serve`` writes: its own, uvicorn's errors, and OpenTelemetry's.
LOGGERS = ("ratewarden", "uvicorn.error", "opentelemetry")
#: Seconds between two of OpenTelemetry's lines with the same message.
OTEL_INTERVAL = 60.0
#: grpc-core's verbosity unless the operator sets ``GRPC_VERBOSITY`` or ``GRPC_TRACE``:
#: its errors only (a Unix socket it could not bind, say), not a line per failed handshake.
GRPC_VERBOSITY = "ERROR"

_STANDARD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message"}


#: Control characters a text line's message shows escaped: a message that quotes a caller's
#: text (a descriptor value in a ``decision`` line) must not start a line of its own that
#: reads as another record. The fields after it are JSON-quoted already.
_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F)} | {
    0x09: "\\t",
    0x0A: "\\n",
    0x0D: "\\r",
}


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
        head += str(entry.pop("msg")).translate(_CONTROLS)
        trace = entry.pop("exc", None)
        pairs = " ".join(f"{key}={json.dumps(value, default=str)}" for key, value in entry.items())
        return head + (f" {pairs}" if pairs else "") + (f"\n{trace}" if trace else "")


class _Bounded(logging.Filter):
    """OpenTelemetry's lines, each message (its format, whatever the arguments) at most once
    an ``interval``; the next says how many were held back. A handler's filter: a logger's
    would not see the records of the exporter's own loggers, which propagate to it."""

    def __init__(self, interval: float, clock: Clock | None) -> None:
        super().__init__()
        self._lines = LogRateLimiter(interval, clock=clock, max_keys=256)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = f"{record.name}:{record.msg}"
        with self._lock:
            held_back = self._lines.suppressed(key)
            if not self._lines.allow(key):
                return False
        if held_back:
            lines = "line" if held_back == 1 else "lines"
            record.msg = f"{record.getMessage()} ({held_back} similar {lines} suppressed)"
            record.args = None
        record.event = "opentelemetry"
        return True


def configure_logging(
    level: str, fmt: str, *, worker: int | None = None, clock: Clock | None = None
) -> None:
    """Send ratewarden's logs to stderr: JSON lines (``fmt="json"``) or text with key=value.

    ``clock`` times the bound on OpenTelemetry's repeated lines (the system's by default)."""
    formatter = _StructuredFormatter(fmt, worker)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    otel = logging.StreamHandler(sys.stderr)
    otel.setFormatter(formatter)
    otel.addFilter(_Bounded(OTEL_INTERVAL, clock))
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [otel if name == "opentelemetry" else handler]
        logger.propagate = False
    logging.getLogger("ratewarden").setLevel(level.upper())
    logging.getLogger("opentelemetry").setLevel(level.upper())


def quiet_grpc_core(environ: MutableMapping[str, str]) -> bool:
    """Set ``GRPC_VERBOSITY`` to ``GRPC_VERBOSITY`` in ``environ`` (``os.environ``) unless
    it or ``GRPC_TRACE`` is set already; True when it set it. Call it before ``grpc`` is
    imported (``--workers``' children inherit it): grpc-core reads it once, at import."""
    if environ.get("GRPC_VERBOSITY") or environ.get("GRPC_TRACE"):
        return False
    environ["GRPC_VERBOSITY"] = GRPC_VERBOSITY
    return True

"""An autouse fixture for tests that run ``ratewarden serve`` in the test process.

``main(["serve", ...])`` run in the test process calls ``configure_logging``, which gives
serve's loggers (``LOGGERS``) a handler on ``sys.stderr`` as it is at that moment (pytest's
capture of that test, closed after it) and stops their records from propagating. A later
test whose command logs a warning (``config check`` on a directory it skips entries of)
then found "--- Logging error --- ... I/O operation on closed file" in its stderr, and a
test reading a serve log line with ``caplog`` found none (not propagated). So each test of
a directory whose conftest imports ``serve_logging_untouched`` starts from serve's loggers
as a new process has them, not just from what the test before it left, and leaves them as
it found them. Imported by tests/cli, tests/server and tests/server_transport (their
conftest.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from ratewarden.server.logs import LOGGERS

__all__ = ["serve_logging_untouched"]


@pytest.fixture(autouse=True)
def serve_logging_untouched() -> Iterator[None]:
    """Serve's loggers without handlers, level or propagation of their own during a test;
    what they had before it, back after it."""
    loggers = [logging.getLogger(name) for name in LOGGERS]
    saved = [(logger.handlers[:], logger.level, logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.handlers.clear()
        logger.setLevel(logging.NOTSET)
        logger.propagate = True
    yield
    for logger, (handlers, level, propagate) in zip(loggers, saved, strict=True):
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate

"""What every CLI test gets: serve's loggers as a new process has them, put back after.

``main(["serve", ...])`` run in the test process gives serve's loggers a handler on the
test's captured stderr (closed after it): see tests/_serve_logging.py, where the fixture is,
shared with tests/server and tests/server_transport.
"""

from __future__ import annotations

from tests._serve_logging import serve_logging_untouched  # noqa: F401  (autouse)

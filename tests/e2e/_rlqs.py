"""`ratewarden serve --rlqs` for the RLQS end-to-end tests: ``serving`` starts processes on
a rule text and stops them after; ``RLQS_FLAGS`` is how the tests run the quota service
(a round a second, assignments that live 5 s)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.server_transport._process import ServeProcess

RLQS_FLAGS = ("--rlqs", "--rlqs-interval", "1", "--rlqs-ttl", "5")
#: One bucket, ``tenant=shared``, shared by the Envoys: 6 a minute, a token bucket.
SHARED_RULES = """\
domain: edge
descriptors:
  - key: tenant
    value: shared
    rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 6}
"""


@contextmanager
def serving(
    directory: Path, rules: str, *flags: str, count: int = 1
) -> Iterator[list[ServeProcess]]:
    """``count`` `ratewarden serve` processes with ``flags`` on ``rules`` (written to
    ``directory``), each serving before the block runs; all stopped after it."""
    path = directory / "rules.yaml"
    path.write_text(rules)
    servers: list[ServeProcess] = []
    try:
        for _ in range(count):
            servers.append(ServeProcess(path, *flags))
        for server in servers:
            server.wait_serving()
        yield servers
    finally:
        for server in servers:
            server.stop()

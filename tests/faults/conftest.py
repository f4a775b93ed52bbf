"""Fixtures for the fault tests: a redis-server behind a FaultProxy, and the figures table."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests._servers import RedisServer
from tests.faults._load import BOUND_S, REPORT, TIMEOUT
from tests.faults._proxy import FaultProxy
from tests.server_transport.conftest import start_server  # noqa: F401 - reused, not copied


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "faults: fault injection against real redis-server (proxy, kill, restart)"
    )


@pytest.fixture
def proxied_redis(
    make_redis: Callable[..., RedisServer],
) -> Iterator[tuple[RedisServer, FaultProxy]]:
    """A dedicated redis-server and a healthy FaultProxy in front of it."""
    server = make_redis()
    proxy = FaultProxy(server.port)
    yield server, proxy
    proxy.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what every phase of load saw (the source of docs/reliability.md)."""
    if not REPORT:
        return
    write = terminalreporter.write_line
    terminalreporter.section("fault injection figures")
    write(f"store timeout {TIMEOUT * 1000:.0f} ms, bound per call {BOUND_S * 1000:.0f} ms")
    write(
        f"{'load':<32} {'phase':<10} {'calls':>5} {'decided':>7} {'allowed':>7} "
        f"{'unavail':>7} {'worst ms':>8} {'charged unanswered':>18}"
    )
    for p in REPORT:
        write(
            f"{p.test:<32} {p.name:<10} {p.calls:>5} {p.decided:>7} {p.allowed:>7} "
            f"{p.unavailable:>7} {p.worst_s * 1000:>8.1f} "
            f"{'' if p.charged_unanswered is None else p.charged_unanswered:>18}"
        )

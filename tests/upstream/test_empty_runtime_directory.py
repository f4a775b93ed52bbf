"""An empty runtime directory is an empty config, as envoyproxy/ratelimit loads it: the server
starts, every domain is unknown and every call OK, and emptying the directory of a running
server takes its rules away; HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true then keeps health
NOT_SERVING. A warning says so at start and at each reload."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from ratewarden.server import config as rules
from ratewarden.server.app import RateLimitServer
from ratewarden.server.reload import ConfigWatcher, ReloadOutcome
from ratewarden.server.settings import resolve
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.server_transport.conftest import OK, OVER_LIMIT, request

RULES = """\
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1}
"""

Start = Callable[..., Awaitable[RateLimitServer]]


def empty_events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if getattr(record, "event", None) == "config_directory_empty"
    ]


def test_an_empty_directory_loads_as_no_rule_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """At start and when the last file goes: an empty config is applied (before: the start
    was refused, and the emptying reload failed, keeping the old rules), with a warning."""
    applied: list[rules.RateLimitConfig] = []
    watcher = ConfigWatcher([str(tmp_path)], rules.load, applied.append)
    with caplog.at_level(logging.WARNING, logger="ratewarden.server.reload"):
        assert dict(watcher.load_initial().domains) == {}
        (tmp_path / "edge.yaml").write_text(RULES)
        assert watcher.check_once() is ReloadOutcome.RELOADED
        (tmp_path / "edge.yaml").unlink()
        assert watcher.check_once() is ReloadOutcome.RELOADED
    assert [sorted(config.domains) for config in applied] == [["edge"], []]
    said = f"config directory holds no rule file: {tmp_path}; no rule is loaded"
    assert [message.startswith(said) for message in empty_events(caplog)] == [True, True]


def test_an_empty_directory_beside_a_file_adds_nothing(tmp_path: Path) -> None:
    """Given with a rule file, an empty directory is no error and adds no domain."""
    (tmp_path / "edge.yaml").write_text(RULES)
    (tmp_path / "more").mkdir()
    loaded = rules.load([tmp_path / "edge.yaml", tmp_path / "more"])
    assert sorted(loaded.domains) == ["edge"]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """``await start(**environ)``: a server started as upstream's environment says, on a
    memory store and free ports, with no reload loop (tests poll the watcher)."""
    servers: list[RateLimitServer] = []

    async def started(**environ: str) -> RateLimitServer:
        flags = {"grpc_port": "0", "http_port": "0", "reload_interval": "0"}
        settings = resolve(flags, environ)
        server = RateLimitServer(settings, store=AsyncMemoryStore(clock=ManualClock()))
        await server.start()
        servers.append(server)
        return server

    yield started
    for server in servers:
        await server.stop(0)


async def codes(server: RateLimitServer, count: int) -> list[int]:
    edge = request("edge", {"api_key": "k"})
    return [(await server.should_rate_limit(edge)).overall_code for _ in range(count)]


@pytest.mark.parametrize("needs_rules", [False, True])
async def test_a_server_on_an_empty_runtime_directory_answers_ok(
    tmp_path: Path, start: Start, needs_rules: bool
) -> None:
    """Started on an empty RUNTIME_ROOT/ratelimit/config it answers OK; a file added is
    enforced, and emptying the directory again lifts it. Health follows upstream's
    HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: unhealthy while nothing is loaded only if true."""
    directory = tmp_path / "ratelimit" / "config"
    directory.mkdir(parents=True)
    server = await start(
        RUNTIME_ROOT=str(tmp_path),
        RUNTIME_SUBDIRECTORY="ratelimit",
        HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=str(needs_rules).lower(),
    )
    assert server.watcher is not None
    assert await codes(server, 2) == [OK, OK]
    assert await server.refresh_health() is not needs_rules
    (directory / "edge.yaml").write_text(RULES)
    assert server.watcher.check_once() is ReloadOutcome.RELOADED
    assert await codes(server, 2) == [OK, OVER_LIMIT]
    assert await server.refresh_health()
    (directory / "edge.yaml").unlink()
    assert server.watcher.check_once() is ReloadOutcome.RELOADED
    assert await codes(server, 2) == [OK, OK]
    assert await server.refresh_health() is not needs_rules

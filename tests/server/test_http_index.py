"""``GET /`` on the HTTP and debug ports lists their endpoints, as envoyproxy/ratelimit's
debug port lists its own (``path: help`` lines, in path order); it was a 404."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from ratewarden.server.app import RateLimitServer
from ratewarden.server.config import loads
from ratewarden.server.settings import Settings
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.server_transport.conftest import RULES, http

Start = Callable[..., Awaitable[RateLimitServer]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """``await start(**settings)``: a server on free ports and a memory store."""
    (tmp_path / "rules.yaml").write_text(RULES)
    servers: list[RateLimitServer] = []

    async def started(**options: object) -> RateLimitServer:
        settings = Settings(
            config_paths=(str(tmp_path),),
            grpc_port=0,
            http_port=0,
            reload_interval=0,
            **options,  # type: ignore[arg-type]
        )
        server = RateLimitServer(settings, store=AsyncMemoryStore(clock=ManualClock()))
        await server.start()
        servers.append(server)
        return server

    yield started
    for server in servers:
        await server.stop(0)


def paths(body: bytes) -> list[str]:
    return [line.split(": ", 1)[0] for line in body.decode().splitlines()]


async def test_the_debug_port_lists_its_endpoints(start: Start) -> None:
    """Every endpoint once, sorted, with what it serves (``/rlqs.json`` only with --rlqs); the
    HTTP port answers the same."""
    server = await start(debug_port=0)
    index = await http(server.debug_port, "GET", "/")
    assert index.status == 200 and index.headers["content-type"].startswith("text/plain")
    assert paths(index.body) == [
        "/dashboard",
        "/dashboard.json",
        "/healthcheck",
        "/json",
        "/metrics",
        "/rlconfig",
    ]
    assert b"/json: POST a RateLimitRequest as JSON" in index.body
    assert (await http(server.http_port, "GET", "/")).body == index.body
    assert (await http(server.http_port, "GET", "/nothing")).status == 404


async def test_the_index_lists_only_what_the_port_serves(start: Start) -> None:
    """With the dashboard off its routes are gone from the index too; the metrics-only port
    (--metrics-port) keeps no index."""
    server = await start(dashboard="off", metrics_port=0)
    index = await http(server.http_port, "GET", "/")
    assert paths(index.body) == ["/healthcheck", "/json", "/metrics", "/rlconfig"]
    assert (await http(server.metrics_port, "GET", "/")).status == 404


def test_envoy_md_shows_rlconfig_lines_as_served() -> None:
    """The two /rlconfig lines docs/envoy.md shows (against upstream's) are what the page's
    ratewarden.yaml gives."""
    page = (Path(__file__).parents[2] / "docs" / "envoy.md").read_text(encoding="utf-8")
    block = page.split("```yaml ratewarden.yaml\n", 1)[1].split("```", 1)[0]
    served = loads(block, "ratewarden.yaml").describe().splitlines()
    for line in (served[0], served[2]):
        assert f"\n  {line}\n" in page

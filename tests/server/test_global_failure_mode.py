"""``serve --failure-mode`` (RATEWARDEN_FAILURE_MODE): what a rule without its own
failure_mode answers while the store is down. envoyproxy/ratelimit answers a store outage
with a gRPC error, which Envoy's ``failure_mode_deny: true`` turns into a denial; here the
service answers, and ``--failure-mode closed`` keeps such a deployment failing closed."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.server import config as rules
from ratewarden.server.app import RateLimitServer
from ratewarden.server.rules_source import file_loader
from ratewarden.server.settings import resolve
from ratewarden.server.xds.rules import load_resources
from tests.server_transport.conftest import OK, OVER_LIMIT, request

pytest.importorskip("redis")

RULES = """\
domain: edge
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: own
    rate_limit: {unit: minute, requests_per_unit: 5, failure_mode: open}
  - key: tokens
    budget: {unit: minute, tokens_per_unit: 100}
  - key: own_tokens
    budget: {unit: minute, tokens_per_unit: 100, failure_mode: open}
"""


def modes(loaded: rules.RateLimitConfig) -> dict[str, str]:
    return {rule.path: rule.failure_mode for rule in loaded.rules}


@pytest.mark.parametrize(
    ("default", "plain", "tokens"),
    [("open", "open", "open"), ("closed", "closed", "closed"), ("local", "local", "open")],
)
def test_rules_without_a_failure_mode_take_the_default(
    default: str, plain: str, tokens: str
) -> None:
    """A rule's own failure_mode wins; a budget takes open or closed, and open for local
    (the in-process fallback counts requests, not tokens)."""
    loaded = rules.load_documents([("rules.yaml", RULES)], default_failure_mode=default)
    assert modes(loaded) == {
        "edge.plain": plain,
        "edge.own": "open",
        "edge.tokens": tokens,
        "edge.own_tokens": "open",
    }


def test_settings_carry_it_to_files_and_xds(tmp_path: Path) -> None:
    """The flag's variable reaches the file loader; load_resources takes the same default;
    /rlconfig's lines (describe) show the effective mode."""
    (tmp_path / "rules.yaml").write_text(RULES)
    settings = resolve({"config_paths": [str(tmp_path)]}, {"RATEWARDEN_FAILURE_MODE": "closed"})
    assert settings.failure_mode == "closed"
    loaded = file_loader(settings)(settings.config_paths)
    assert modes(loaded)["edge.plain"] == "closed"
    assert "edge.plain: 5/minute algorithm=fixed_window failure_mode=closed" in loaded.describe()
    assert load_resources([], default_failure_mode="closed").domains == {}
    with pytest.raises(ConfigurationError, match="must be one of: open, closed, local"):
        resolve({"config_paths": ["r.yaml"], "failure_mode": "deny"}, {})


def closed_port() -> int:
    """A loopback port nothing listens on: a Redis that is down."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


Start = Callable[..., Awaitable[RateLimitServer]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """``await start(**flags)``: a server on free ports whose Redis is down."""
    (tmp_path / "rules.yaml").write_text(RULES)
    servers: list[RateLimitServer] = []

    async def started(**flags: str) -> RateLimitServer:
        given = {
            "config_paths": [str(tmp_path)],
            "store_url": f"redis://127.0.0.1:{closed_port()}/0",
            "grpc_port": "0",
            "http_port": "0",
            "reload_interval": "0",
            **flags,
        }
        server = RateLimitServer(resolve(given, {}))
        await server.start()
        servers.append(server)
        return server

    yield started
    for server in servers:
        await server.stop(0)


@pytest.mark.parametrize(("default", "answer"), [(None, OK), ("closed", OVER_LIMIT)])
async def test_a_store_outage_answers_by_the_global_failure_mode(
    start: Start, default: str | None, answer: int
) -> None:
    """Redis down: a rule without failure_mode allows by default and denies under
    --failure-mode closed (before, there was no such option: it allowed); a rule that
    says open allows either way. Past the breaker's failures, the same answers."""
    server = await start(**({} if default is None else {"failure_mode": default}))
    for _ in range(7):  # the breaker opens after 5 failures in a row
        plain = await server.should_rate_limit(request("edge", {"plain": "k"}))
        own = await server.should_rate_limit(request("edge", {"own": "k"}))
        assert (plain.overall_code, own.overall_code) == (answer, OK)
    expected = "closed" if default == "closed" else "open"
    assert f"edge.plain: 5/minute algorithm=fixed_window failure_mode={expected}" in (
        server.rules_text()
    )

"""``ratewarden serve`` as a process with its rules from xDS: upstream's environment alone
starts it, SIGTERM ends its wait for the first rules, FORCE_START_WITHOUT_INITIAL_CONFIG
opens the ports before them, and each worker subscribes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden.server.xds import messages
from tests._servers import RedisServer, free_port
from tests.server_transport._process import RATEWARDEN
from tests.server_transport.conftest import channel, http, request
from tests.xds._control_plane import ControlPlane, until
from tests.xds.conftest import limit, resource

START_S = 30.0  # a process start on a loaded 2-core machine, imports included


def hourly(key: str, per_hour: int) -> Any:
    """A descriptor ``key`` limited to ``per_hour`` requests an hour: serve's memory store is
    on the system clock, and a minute's end among the calls a test counts would start a new
    fixed window."""
    policy = messages.RateLimitPolicy(unit=3, requests_per_unit=per_hour)  # HOUR
    return messages.RateLimitDescriptor(key=key, rate_limit=policy)


def _environ(**settings: str) -> dict[str, str]:
    """This environment without any RATEWARDEN_* setting, plus ``settings``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RATEWARDEN_")}
    environ.update(settings)
    return environ


class Serve:
    """``ratewarden serve`` (no flag) with ``environ``; its log in a file."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log = log

    @classmethod
    async def start(cls, environ: dict[str, str], *args: str) -> Serve:
        log = Path(tempfile.mkstemp(prefix="ratewarden-xds-", suffix=".log")[1])
        with open(log, "wb") as out:
            process = await asyncio.create_subprocess_exec(
                *RATEWARDEN, "serve", *args, stdout=out, stderr=out, env=environ
            )
        return cls(process, log)

    def events(self) -> list[str]:
        lines = self.log.read_text().splitlines()
        return [json.loads(line).get("event", "") for line in lines if line.startswith("{")]

    async def stop(self, signum: int = signal.SIGINT) -> int:
        """SIGINT by default: a stop without the ``--drain`` a SIGTERM waits out."""
        if self.process.returncode is None:
            self.process.send_signal(signum)
        try:
            return await asyncio.wait_for(self.process.wait(), 20)
        finally:
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()


@pytest.fixture
async def serving() -> AsyncIterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for serve in started:
        await serve.stop()
        serve.log.unlink(missing_ok=True)


async def _healthy(port: int, serve: Serve) -> None:
    deadline = time.monotonic() + START_S
    while True:
        try:
            if (await http(port, "GET", "/healthcheck")).status == 200:
                return
        except OSError:
            pass
        if serve.process.returncode is not None or time.monotonic() > deadline:
            pytest.fail(f"serve did not start:\n{serve.log.read_text()}")
        await asyncio.sleep(0.05)


async def _post(port: int, value: str) -> int:
    body = {"domain": "shop", "descriptors": [{"entries": [{"key": "api_key", "value": value}]}]}
    return (await http(port, "POST", "/json", json.dumps(body).encode())).status


async def test_upstreams_environment_alone_takes_the_rules_from_the_control_plane(
    plane: ControlPlane, serving: list[Serve]
) -> None:
    """CONFIG_TYPE=GRPC_XDS_SOTW, CONFIG_GRPC_XDS_SERVER_URL and CONFIG_GRPC_XDS_NODE_ID, the
    ports from PORT and GRPC_PORT, no ratewarden setting: it subscribes as that node, serves
    once the rules arrive, and decides from them."""
    plane.publish("v1", resource("shop-rules", "shop", hourly("api_key", 2)))
    port = free_port()
    environ = _environ(
        CONFIG_TYPE="GRPC_XDS_SOTW",
        CONFIG_GRPC_XDS_SERVER_URL=plane.address,
        CONFIG_GRPC_XDS_NODE_ID="rl-edge",
        PORT=str(port),
        GRPC_PORT=str(free_port()),
        USE_STATSD="false",
    )
    serve = await Serve.start(environ)
    serving.append(serve)
    await _healthy(port, serve)
    assert plane.subscriptions()[0].request.node.id == "rl-edge"
    assert [await _post(port, "k") for _ in range(3)] == [200, 200, 429]
    plane.publish("v2", resource("shop-rules", "shop", hourly("api_key", 5)))
    assert (await plane.answer(plane.sent[-1])).is_ack
    assert await _post(port, "k") == 200
    assert {"xds_waiting", "config_xds_applied", "serving"} <= set(serve.events())


async def test_sigterm_ends_the_wait_for_the_first_rules(serving: list[Serve]) -> None:
    """No control plane answers: serve waits for its first rules, retrying; SIGTERM then
    stops it cleanly (exit 0) without it ever serving."""
    port = free_port()
    serve = await Serve.start(
        _environ(RATEWARDEN_HTTP_PORT=str(port), RATEWARDEN_GRPC_PORT=str(free_port())),
        "--config-xds",
        f"127.0.0.1:{free_port()}",
        "--xds-retry-interval",
        "0.05",
        "--xds-retry-max",
        "0.1",
    )
    serving.append(serve)
    deadline = time.monotonic() + START_S
    while serve.events().count("xds_disconnected") < 2:
        assert serve.process.returncode is None, serve.log.read_text()
        assert time.monotonic() < deadline, serve.log.read_text()
        await asyncio.sleep(0.05)
    assert await serve.stop(signal.SIGTERM) == 0
    assert "serving" not in serve.events()
    assert serve.events()[-1] == "stopped"


async def test_upstreams_force_start_serves_failing_calls_until_the_control_plane_answers(
    serving: list[Serve],
) -> None:
    """FORCE_START_WITHOUT_INITIAL_CONFIG=true with the control plane down: the ports open
    (health 200), /json is 503 and ShouldRateLimit UNAVAILABLE on the default transport with
    upstream's words; the control plane comes up and the rules decide."""
    port, grpc_port, plane = free_port(), free_port(), ControlPlane()
    plane.port = free_port()
    environ = _environ(
        CONFIG_TYPE="GRPC_XDS_SOTW",
        CONFIG_GRPC_XDS_SERVER_URL=plane.address,
        CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL="50ms",
        XDS_CLIENT_BACKOFF_MAX_INTERVAL="100ms",
        FORCE_START_WITHOUT_INITIAL_CONFIG="true",
        PORT=str(port),
        GRPC_PORT=str(grpc_port),
        USE_STATSD="false",
    )
    serve = await Serve.start(environ)
    serving.append(serve)
    await _healthy(port, serve)
    assert await _post(port, "k") == 503
    async with channel(grpc_port) as chan:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await rls_pb2_grpc.RateLimitServiceStub(chan).ShouldRateLimit(
                request("shop", {"api_key": "k"}), timeout=START_S
            )
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert raised.value.details() == "no rate limit configuration loaded"
    plane.publish("v1", resource("shop-rules", "shop", hourly("api_key", 2)))
    await plane.start()
    try:
        await until(lambda: bool(plane.sent) and bool(plane.answers_to(plane.sent[-1])), "ACK")
        assert [await _post(port, "k") for _ in range(3)] == [200, 200, 429]
    finally:
        await plane.stop()
    assert {"xds_force_start", "serving", "config_xds_applied"} <= set(serve.events())
    assert "xds_waiting" not in serve.events()


@pytest.mark.redis
async def test_each_worker_subscribes_on_its_own(
    plane: ControlPlane, serving: list[Serve], redis_server: RedisServer
) -> None:
    """--workers 2: two subscriptions, as two upstream replicas would open; both ACK."""
    plane.publish("v1", resource("shop-rules", "shop", limit("api_key", 2)))
    port = free_port()
    serve = await Serve.start(
        _environ(),
        "--config-xds",
        plane.address,
        "--workers",
        "2",
        "--store",
        redis_server.url,
        "--store-timeout",
        "1",
        "--http-port",
        str(port),
        "--grpc-port",
        str(free_port()),
    )
    serving.append(serve)
    await _healthy(port, serve)
    await until(lambda: len(plane.subscriptions()) == 2, "two subscriptions", timeout=START_S)
    await until(
        lambda: len([item for item in plane.received if item.is_ack]) == 2,
        "two ACKs",
        timeout=START_S,
    )
    assert len({item.stream for item in plane.subscriptions()}) == 2

"""A control plane the tests start on loopback, rule resources built with our messages, and
a server that takes its rules from the control plane."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ratewarden.server.app import RateLimitServer
from ratewarden.server.settings import Settings
from ratewarden.server.xds import messages
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock
from tests.xds._control_plane import ControlPlane


def limit(key: str, per_minute: int, **fields: Any) -> Any:
    """A descriptor ``key`` limited to ``per_minute`` requests a minute."""
    policy = messages.RateLimitPolicy(unit=2, requests_per_unit=per_minute)  # MINUTE
    return messages.RateLimitDescriptor(key=key, rate_limit=policy, **fields)


def resource(name: str, domain: str, *descriptors: Any) -> Any:
    """A ``RateLimitConfig`` resource."""
    return messages.RateLimitConfig(name=name, domain=domain, descriptors=list(descriptors))


def xds_server(plane: ControlPlane, **options: Any) -> RateLimitServer:
    """A RateLimitServer, not started, on a memory store and loopback ports 0, with rules from
    ``plane`` alone, retrying every 20-60 ms; ``options`` add or replace settings."""
    settings: dict[str, Any] = {
        "config_paths": (),
        "config_xds": plane.address,
        "grpc_port": 0,
        "http_port": 0,
        "xds_retry_interval": 0.02,
        "xds_retry_max": 0.06,
        **options,
    }
    return RateLimitServer(Settings(**settings), store=AsyncMemoryStore(clock=ManualClock()))


@pytest.fixture
async def plane() -> AsyncIterator[ControlPlane]:
    """A started control plane with nothing published; stopped after the test."""
    started = await ControlPlane.started()
    yield started
    await started.stop()


#: Seconds a server of these tests may take to start.
START_S = 5.0


@pytest.fixture
async def servers() -> AsyncIterator[list[RateLimitServer]]:
    """Servers a test started (``forced``); stopped after it."""
    started: list[RateLimitServer] = []
    yield started
    for server in started:
        await server.stop(0)


async def forced(
    plane: ControlPlane, servers: list[RateLimitServer], **options: Any
) -> RateLimitServer:
    """A server on ``plane`` with --xds-force-start, started (its ports open)."""
    server = xds_server(plane, xds_force_start=True, **options)
    servers.append(server)
    await asyncio.wait_for(server.start(), START_S)
    return server

"""A control plane the tests start on loopback, and rule resources built with our messages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from ratewarden.server.xds import messages
from tests.xds._control_plane import ControlPlane


def limit(key: str, per_minute: int, **fields: Any) -> Any:
    """A descriptor ``key`` limited to ``per_minute`` requests a minute."""
    policy = messages.RateLimitPolicy(unit=2, requests_per_unit=per_minute)  # MINUTE
    return messages.RateLimitDescriptor(key=key, rate_limit=policy, **fields)


def resource(name: str, domain: str, *descriptors: Any) -> Any:
    """A ``RateLimitConfig`` resource."""
    return messages.RateLimitConfig(name=name, domain=domain, descriptors=list(descriptors))


@pytest.fixture
async def plane() -> AsyncIterator[ControlPlane]:
    """A started control plane with nothing published; stopped after the test."""
    started = await ControlPlane.started()
    yield started
    await started.stop()

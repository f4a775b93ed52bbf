"""A real uvicorn server on loopback running the throttling app, for the whole module."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from tests.client._app import ThrottleState, build_app
from tests.client._live import LiveASGI


@pytest.fixture(scope="module")
def throttle_state() -> ThrottleState:
    """What the throttling server saw."""
    return ThrottleState()


@pytest.fixture(scope="module")
def throttle_server(throttle_state: ThrottleState) -> Iterator[LiveASGI]:
    """The throttling app under uvicorn on 127.0.0.1."""
    server = LiveASGI(build_app(throttle_state))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def other_server() -> Iterator[LiveASGI]:
    """A second throttling app under uvicorn on another port: another host to a breaker."""
    server = LiveASGI(build_app(ThrottleState()))
    yield server
    server.stop()


_names = itertools.count()


@pytest.fixture
def fresh_name() -> Callable[[], str]:
    """Unique throttle names, so tests sharing the server never share counters."""
    return lambda: f"t{next(_names)}"

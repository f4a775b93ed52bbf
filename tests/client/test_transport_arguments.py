"""What the retrying transports are given is checked when they are built, not at the first 429.

``random``, ``clock``, ``key_factory`` and the inner transport are called only on a
retry or on a keyed POST, so a wrong one used to pass unnoticed until then (a
``TypeError`` or ``AttributeError`` at the first production 429). What only shows when
called, a ``key_factory`` or ``random`` returning the wrong kind of value, is refused when
it is called, before anything more is sent, against a real uvicorn server on loopback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from ratewarden.client import (
    AsyncRetryTransport,
    RetryPolicy,
    RetryTransport,
    retry_adapter,
    retry_session,
)
from ratewarden.errors import ConfigurationError
from ratewarden.testing import ManualClock
from tests.client._app import ThrottleState
from tests.client._fakes import RecordingClock
from tests.client._live import LiveASGI

KEYED = RetryPolicy(idempotency_keys=True)
BUILDERS: list[Callable[..., Any]] = [
    RetryTransport,
    AsyncRetryTransport,
    retry_adapter,
    retry_session,
]
BUILDER_IDS = ["RetryTransport", "AsyncRetryTransport", "retry_adapter", "retry_session"]


@pytest.mark.parametrize("build", BUILDERS, ids=BUILDER_IDS)
@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"random": 0.5}, "random=0.5 is not callable: pass a function returning floats"),
        (
            {"clock": time},
            "clock=<module 'time'.* has no now\\(\\).*: pass a ratewarden.clock.Clock",
        ),
        ({"clock": 5}, "clock=5 has no now\\(\\) or .*sleep\\(\\)"),
        ({"key_factory": "k", "policy": KEYED}, "key_factory='k' is not callable: pass a function"),
    ],
    ids=["random-float", "clock-module", "clock-int", "key_factory-str"],
)
def test_wrong_sources_are_refused_when_built(
    build: Callable[..., Any], kwargs: dict[str, Any], words: str
) -> None:
    """Each wrong source raises ConfigurationError saying what it is and what to pass."""
    with pytest.raises(ConfigurationError, match=words):
        build(**kwargs)


def test_a_clock_without_the_sleep_its_transport_uses_is_refused() -> None:
    """The blocking transport sleeps with ``sleep``, the asyncio one with ``asleep``."""

    class NowOnly:
        def now(self) -> float:
            return 0.0

        def now_us(self) -> int:
            return 0

    with pytest.raises(ConfigurationError, match=r"RetryTransport: clock=.* has no sleep\(\)"):
        RetryTransport(clock=NowOnly())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"AsyncRetryTransport: .* has no asleep\(\)"):
        AsyncRetryTransport(clock=NowOnly())  # type: ignore[arg-type]


def test_an_asyncio_inner_transport_is_refused_by_the_blocking_one() -> None:
    """httpx.AsyncHTTPTransport has no handle_request: said at once, naming the twin."""
    with pytest.raises(
        ConfigurationError,
        match=r"RetryTransport: transport=.*AsyncHTTPTransport.* has no handle_request or close"
        r".*use AsyncRetryTransport",
    ):
        RetryTransport(httpx.AsyncHTTPTransport())  # type: ignore[arg-type]


def test_a_blocking_inner_transport_is_refused_by_the_asyncio_one() -> None:
    """httpx.HTTPTransport has no handle_async_request: said at once, naming the twin."""
    with pytest.raises(
        ConfigurationError,
        match=r"AsyncRetryTransport: transport=.*HTTPTransport.* has no handle_async_request "
        r"or aclose.*use RetryTransport",
    ):
        AsyncRetryTransport(httpx.HTTPTransport())  # type: ignore[arg-type]


def test_the_right_sources_and_inner_transports_are_taken() -> None:
    """The documented forms still build: a ManualClock, a random function, a key factory,
    and each transport's own kind of inner transport."""
    RetryTransport(httpx.HTTPTransport(), clock=ManualClock(), random=lambda: 0.5)
    AsyncRetryTransport(httpx.AsyncHTTPTransport(), key_factory=lambda: "k", policy=KEYED)
    retry_adapter(clock=ManualClock(), random=lambda: 0.5, key_factory=lambda: "k")


@pytest.mark.parametrize("key", [42, b"k", "", None])
def test_a_key_factory_returning_no_str_is_refused_before_sending(
    throttle_server: LiveASGI,
    throttle_state: ThrottleState,
    fresh_name: Callable[[], str],
    key: object,
) -> None:
    """A POST under idempotency_keys calls the factory first: a non-str (or empty) key is a
    ConfigurationError naming what it returned, and nothing reaches the server."""
    name = fresh_name()
    transport = RetryTransport(policy=KEYED, clock=RecordingClock(), key_factory=lambda: key)  # type: ignore[arg-type, return-value]
    with (
        httpx.Client(base_url=throttle_server.url, transport=transport) as client,
        pytest.raises(
            ConfigurationError,
            match=rf"RetryTransport: key_factory returned {key!r}; it must return a non-empty str",
        ),
    ):
        client.post(f"/throttle/{name}", params={"n": 0})
    assert throttle_state.attempts[name] == []


async def test_an_async_key_factory_returning_no_str_is_refused_before_sending(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """The asyncio twin checks the key the same way."""
    name = fresh_name()
    transport = AsyncRetryTransport(policy=KEYED, key_factory=lambda: 42)  # type: ignore[arg-type, return-value]
    async with httpx.AsyncClient(base_url=throttle_server.url, transport=transport) as client:
        with pytest.raises(ConfigurationError, match="key_factory returned 42"):
            await client.post(f"/throttle/{name}", params={"n": 0})
    assert throttle_state.attempts[name] == []


def test_a_random_returning_no_number_is_refused_at_the_retry(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """``random`` is called only to wait: one returning "0.5" is a ConfigurationError there,
    saying what it returned, rather than a TypeError from a comparison; no retry is sent."""
    name = fresh_name()
    clock = RecordingClock()
    transport = RetryTransport(clock=clock, random=lambda: "0.5")  # type: ignore[arg-type, return-value]
    with (
        httpx.Client(base_url=throttle_server.url, transport=transport) as client,
        pytest.raises(ConfigurationError, match=r"random returned '0\.5'; it must return floats"),
    ):
        client.get(f"/throttle/{name}", params={"n": 1, "h": "Retry-After:1"})
    assert len(throttle_state.attempts[name]) == 1
    assert clock.slept == []

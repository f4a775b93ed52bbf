"""A circuit per host: ratewarden's CircuitBreaker(per_node=True) given to real transports.

Two real uvicorn servers on loopback are two hosts (the port is part of the host). The
breaker and the transports share a recording ManualClock, so cool-downs pass at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import requests
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratewarden import CircuitBreaker
from ratewarden.client import (
    AsyncRetryTransport,
    HostCircuitOpenError,
    RetryPolicy,
    RetryTransport,
    retry_adapter,
    retry_session,
)
from ratewarden.errors import ConfigurationError
from tests.client._app import ThrottleState
from tests.client._fakes import RecordingClock
from tests.client._live import LiveASGI, free_port

ONCE = RetryPolicy(max_attempts=1)


def host_breaker(clock: RecordingClock, failures: int = 3) -> CircuitBreaker:
    """A circuit per host that opens after ``failures`` failed attempts in a row, for 30 s."""
    return CircuitBreaker(
        per_node=True, failures=failures, failure_ratio=None, cooldown=30, clock=clock
    )


def sync_client(clock: RecordingClock, breaker: CircuitBreaker, **kw: Any) -> httpx.Client:
    transport = RetryTransport(clock=clock, random=lambda: 0.5, breaker=breaker, **kw)
    return httpx.Client(transport=transport, timeout=5)


def test_httpx_circuit_opens_per_host_fails_fast_and_probes_after_the_cooldown(
    throttle_server: LiveASGI,
    other_server: LiveASGI,
    throttle_state: ThrottleState,
    fresh_name: Callable[[], str],
) -> None:
    """Three 500s in a row open the host's circuit: the fourth request raises an httpx
    TransportError naming the host and the 30 s left, without reaching the server, while
    the other host is served. After the cool-down one probe goes: a 500 opens the circuit
    again, and after the next cool-down a 200 closes it."""
    clock, name = RecordingClock(), fresh_name()
    url = f"{throttle_server.url}/throttle/{name}?n=4&status=500"
    with sync_client(clock, host_breaker(clock), policy=ONCE) as client:
        assert [client.get(url).status_code for _ in range(3)] == [500, 500, 500]
        with pytest.raises(httpx.TransportError) as info:
            client.get(url)
        assert isinstance(info.value, HostCircuitOpenError)
        assert info.value.origin == throttle_server.url
        assert f"circuit open for {throttle_server.url}" in str(info.value)
        assert "next probe in 30.000 s" in str(info.value)
        assert client.get(f"{other_server.url}/throttle/{fresh_name()}?n=0").status_code == 200
        clock.advance(29.9)
        with pytest.raises(HostCircuitOpenError, match=r"next probe in 0\.100 s"):
            client.get(url)
        assert len(throttle_state.attempts[name]) == 3
        clock.advance(0.1)
        assert client.get(url).status_code == 500  # the probe: fails, so open again
        with pytest.raises(HostCircuitOpenError, match=r"30\.000 s"):
            client.get(url)
        clock.advance(30)
        assert client.get(url).status_code == 200  # the probe: succeeds, so closed
        assert client.get(url).status_code == 200
    assert len(throttle_state.attempts[name]) == 6
    assert clock.slept == []


def test_a_request_stops_retrying_once_its_own_failures_open_the_circuit(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """Ten attempts allowed, but the third 503 in a row opens the circuit for 30 s, longer
    than the next wait: the request gives up at once with that 503, after two sleeps."""
    clock, name = RecordingClock(), fresh_name()
    with sync_client(clock, host_breaker(clock), policy=RetryPolicy(max_attempts=10)) as client:
        response = client.get(f"{throttle_server.url}/throttle/{name}?n=100&status=503")
    assert (response.status_code, response.text) == (503, "slow down")
    assert len(throttle_state.attempts[name]) == 3
    assert clock.slept == [0.25, 0.5]


def test_connection_errors_count_and_the_last_one_is_raised() -> None:
    """A closed port: three ConnectErrors open its circuit mid-request, and that request
    raises its last ConnectError after two sleeps; the next one fails fast, without a sleep."""
    clock, url = RecordingClock(), f"http://127.0.0.1:{free_port()}/"
    with sync_client(clock, host_breaker(clock)) as client:
        with pytest.raises(httpx.ConnectError):
            client.get(url)
        assert clock.slept == [0.25, 0.5]
        with pytest.raises(HostCircuitOpenError):
            client.get(url)
    assert clock.slept == [0.25, 0.5]


def test_what_counts_as_a_failure(throttle_server: LiveASGI, fresh_name: Callable[[], str]) -> None:
    """With a circuit that opens on one failure: a 404 and a 429 that was retried into a 200
    are not failures; a 429 the client gives up on is."""
    clock = RecordingClock()
    base = f"{throttle_server.url}/throttle"
    policy = RetryPolicy(max_attempts=2)
    with sync_client(clock, host_breaker(clock, failures=1), policy=policy) as client:
        assert client.get(f"{throttle_server.url}/nowhere").status_code == 404
        assert client.get(f"{base}/{fresh_name()}?n=1&h=Retry-After:1").status_code == 200
        assert client.get(f"{base}/{fresh_name()}?n=5&h=Retry-After:1").status_code == 429
        with pytest.raises(HostCircuitOpenError):
            client.get(f"{base}/{fresh_name()}?n=0")


def test_a_retry_after_on_the_failures_holds_the_circuit_open_that_long(
    throttle_server: LiveASGI,
    throttle_state: ThrottleState,
    fresh_name: Callable[[], str],
) -> None:
    """Three 503s saying Retry-After: 120 open the host's circuit for 120 s, not the
    breaker's 30: no probe goes at 30 s, one goes at 120. A Retry-After shorter than the
    cool-down (5 s) does not shorten it; one past max_hold (a day) holds max_hold."""
    clock = RecordingClock()
    base = f"{throttle_server.url}/throttle"
    breaker = CircuitBreaker(
        per_node=True, failures=3, failure_ratio=None, cooldown=30, max_hold=600, clock=clock
    )
    with sync_client(clock, breaker, policy=ONCE) as client:
        name = fresh_name()
        url = f"{base}/{name}?n=3&status=503&h=Retry-After:120"
        assert [client.get(url).status_code for _ in range(3)] == [503] * 3
        with pytest.raises(HostCircuitOpenError, match=r"next probe in 120\.000 s"):
            client.get(url)
        clock.advance(30)
        with pytest.raises(HostCircuitOpenError, match=r"next probe in 90\.000 s"):
            client.get(url)
        clock.advance(90)
        assert client.get(url).status_code == 200  # the probe, past the server's 120 s
        assert len(throttle_state.attempts[name]) == 4
        for retry_after, held in (("5", "30.000"), ("86400", "600.000")):
            url = f"{base}/{fresh_name()}?n=3&status=503&h=Retry-After:{retry_after}"
            assert [client.get(url).status_code for _ in range(3)] == [503] * 3
            with pytest.raises(HostCircuitOpenError, match=f"next probe in {held} s"):
                client.get(url)
            clock.advance(600)
            assert client.get(url).status_code == 200


async def test_async_circuit_opens_per_host_and_probes_after_the_cooldown(
    throttle_server: LiveASGI,
    other_server: LiveASGI,
    throttle_state: ThrottleState,
    fresh_name: Callable[[], str],
) -> None:
    """The asyncio transport over the same breaker: open after three 503s (retried within
    requests), fail fast as an httpx TransportError, other host served, one probe after the
    cool-down closes it."""
    clock, name = RecordingClock(), fresh_name()
    url = f"{throttle_server.url}/throttle/{name}?n=3&status=503"
    breaker = host_breaker(clock)
    policy = RetryPolicy(max_attempts=2)
    transport = AsyncRetryTransport(policy=policy, clock=clock, random=lambda: 0.5, breaker=breaker)
    async with httpx.AsyncClient(transport=transport, timeout=5) as client:
        assert (await client.get(url)).status_code == 503  # two attempts
        assert (await client.get(url)).status_code == 503  # the third opens it
        with pytest.raises(httpx.TransportError, match=r"circuit open for .* 30\.000 s"):
            await client.get(url)
        assert (await client.get(f"{other_server.url}/throttle/{fresh_name()}?n=0")).is_success
        clock.advance(30)
        assert (await client.get(url)).status_code == 200
    assert len(throttle_state.attempts[name]) == 4
    assert breaker.states()[throttle_server.url] == "closed"


async def test_a_cancelled_probe_gives_its_place_back() -> None:
    """A probe whose task is cancelled while the host is still answering reports no verdict
    but gives the probe back, so the next request probes instead of failing fast."""
    clock = RecordingClock()
    breaker, entered = host_breaker(clock, failures=1), asyncio.Event()

    async def hang(request: Request) -> PlainTextResponse:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def boom(request: Request) -> PlainTextResponse:
        return PlainTextResponse("down", 500)

    app = Starlette(routes=[Route("/hang", hang), Route("/boom", boom)])
    inner = httpx.ASGITransport(app)
    transport = AsyncRetryTransport(inner, policy=ONCE, clock=clock, breaker=breaker)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        assert (await client.get("/boom")).status_code == 500
        clock.advance(30)
        probe = asyncio.create_task(client.get("/hang"))
        await asyncio.wait_for(entered.wait(), 5)
        probe.cancel()
        with pytest.raises(asyncio.CancelledError):
            await probe
        assert (await client.get("/boom")).status_code == 500  # probed, not refused
        with pytest.raises(HostCircuitOpenError, match=r"30\.000 s"):
            await client.get("/boom")


def test_requests_circuit_fails_fast_as_a_requests_connection_error(
    throttle_server: LiveASGI,
    other_server: LiveASGI,
    throttle_state: ThrottleState,
    fresh_name: Callable[[], str],
) -> None:
    """requests through retry_session: three 502s open the host's circuit; the next request
    raises requests' own ConnectionError (so RequestException catches it too) without reaching
    the server; the other host is served; after the cool-down the probe closes it."""
    clock, name = RecordingClock(), fresh_name()
    url = f"{throttle_server.url}/throttle/{name}?n=3&status=502"
    with retry_session(ONCE, clock=clock, breaker=host_breaker(clock)) as session:
        assert [session.get(url).status_code for _ in range(3)] == [502] * 3
        with pytest.raises(requests.ConnectionError) as info:
            session.get(url)
        assert isinstance(info.value, requests.RequestException)
        assert isinstance(info.value, HostCircuitOpenError)
        assert "next probe in 30.000 s" in str(info.value)
        assert session.get(f"{other_server.url}/throttle/{fresh_name()}?n=0").ok
        clock.advance(30)
        assert session.get(url).status_code == 200
    assert len(throttle_state.attempts[name]) == 4


@pytest.mark.parametrize(
    ("breaker", "words"),
    [
        (CircuitBreaker(), r"keeps one circuit for every host: pass CircuitBreaker\(per_node"),
        (object(), "has no allow, success, failure, abandon, retry_in"),
        ("breaker", "breaker='breaker' has no allow"),
    ],
)
def test_a_breaker_without_a_circuit_per_host_is_refused(breaker: object, words: str) -> None:
    """Each transport and the adapter refuse, by name, a breaker that cannot keep a circuit
    per host."""
    for make in (
        lambda: RetryTransport(breaker=breaker),  # type: ignore[arg-type]
        lambda: AsyncRetryTransport(breaker=breaker),  # type: ignore[arg-type]
        lambda: retry_adapter(breaker=breaker),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigurationError, match=words):
            make()


def test_a_budget_that_is_not_a_retry_budget_is_refused() -> None:
    """budget= takes a RetryBudget; anything else is refused naming the value."""
    with pytest.raises(ConfigurationError, match=r"budget=0\.1: pass a RetryBudget"):
        RetryTransport(budget=0.1)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"budget=0\.1: pass a RetryBudget"):
        retry_session(budget=0.1)  # type: ignore[arg-type]

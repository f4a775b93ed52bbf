"""A RetryBudget shared by real transports against a real uvicorn server on loopback.

The budgets' clocks stand still (a ManualClock nobody advances), so the floor adds nothing
and each budget holds exactly ``burst + ratio * requests`` retries; the transports sleep on
their own recording clocks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import httpx
import pytest

from ratewarden.client import (
    AsyncRetryTransport,
    RetriesExhaustedError,
    RetryBudget,
    RetryPolicy,
    RetryTransport,
    retry_session,
)
from ratewarden.testing import ManualClock
from tests.client._app import ThrottleState
from tests.client._fakes import RecordingClock
from tests.client._live import LiveASGI, free_port


def one_retry() -> RetryBudget:
    """A budget of exactly one retry: no deposits, no floor, a burst of one."""
    return RetryBudget(ratio=0, min_per_second=0, burst=1, clock=ManualClock())


def failing(server: LiveASGI, name: str) -> str:
    """A URL that answers 503 with ``X-Attempt: yes`` and ``slow down`` a hundred times."""
    return f"{server.url}/throttle/{name}?n=100&status=503&h=X-Attempt:yes"


def test_httpx_empty_budget_returns_the_last_response_as_is(
    throttle_server: LiveASGI,
    throttle_state: ThrottleState,
    fresh_name: Callable[[], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first request spends the one retry; when the budget is empty the 503 itself comes
    back, body and headers as the server sent them, without an exception, counted and logged;
    the next request gets no retry at all."""
    clock, budget, name = RecordingClock(), one_retry(), fresh_name()
    transport = RetryTransport(clock=clock, random=lambda: 0.5, budget=budget)
    with (
        caplog.at_level(logging.WARNING, logger="ratewarden.client"),
        httpx.Client(transport=transport, timeout=5) as client,
    ):
        first = client.get(failing(throttle_server, name))
        second = client.get(failing(throttle_server, name))
    assert (first.status_code, first.text, first.headers["x-attempt"]) == (503, "slow down", "yes")
    assert second.status_code == 503
    assert len(throttle_state.attempts[name]) == 3
    assert clock.slept == [0.25]
    assert (budget.requests, budget.retries, budget.refused) == (2, 1, 2)
    assert any("retry budget empty" in r.getMessage() for r in caplog.records)


def test_httpx_empty_budget_raises_only_when_asked(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """With raise_on_give_up the caller asked for an error on every give-up: an empty budget
    is one, and RetriesExhaustedError says so and carries the read 503."""
    clock, name = RecordingClock(), fresh_name()
    policy = RetryPolicy(raise_on_give_up=True)
    transport = RetryTransport(policy=policy, clock=clock, budget=one_retry())
    with (
        httpx.Client(transport=transport, timeout=5) as client,
        pytest.raises(RetriesExhaustedError, match="the retry budget is empty") as info,
    ):
        client.get(failing(throttle_server, name))
    assert info.value.response.status_code == 503
    assert info.value.response.content == b"slow down"


def test_connection_errors_spend_the_budget_too() -> None:
    """A closed port: one retry from the budget, then the ConnectError itself is raised."""
    clock = RecordingClock()
    transport = RetryTransport(clock=clock, random=lambda: 0.5, budget=one_retry())
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.ConnectError):
        client.get(f"http://127.0.0.1:{free_port()}/")
    assert clock.slept == [0.25]


async def test_async_empty_budget_returns_the_last_response(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """The asyncio transport spends the same budget the same way: one retry, then the 503."""
    clock, budget, name = RecordingClock(), one_retry(), fresh_name()
    transport = AsyncRetryTransport(clock=clock, random=lambda: 0.5, budget=budget)
    async with httpx.AsyncClient(transport=transport, timeout=5) as client:
        response = await client.get(failing(throttle_server, name))
    assert (response.status_code, response.text) == (503, "slow down")
    assert len(throttle_state.attempts[name]) == 2
    assert (budget.retries, budget.refused) == (1, 1)


def test_requests_empty_budget_returns_the_last_response(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """The requests adapter too: one retry, then the 503 with the server's headers."""
    clock, budget, name = RecordingClock(), one_retry(), fresh_name()
    with retry_session(clock=clock, random=lambda: 0.5, budget=budget) as session:
        response = session.get(failing(throttle_server, name))
    assert (response.status_code, response.text) == (503, "slow down")
    assert response.headers["X-Attempt"] == "yes"
    assert len(throttle_state.attempts[name]) == 2
    assert (budget.retries, budget.refused) == (1, 1)


def test_one_budget_bounds_several_transports_in_several_threads(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """Two httpx clients and two requests sessions, each in its own thread, send 10 requests
    apiece to a server that answers only 503. Alone, each request would make 5 attempts (160
    retries); sharing RetryBudget(ratio=0.1, burst=3) they make at most 3 + 0.1 * 40 = 7 (6
    when the first requests' deposits come while the budget is still full and are cut at its
    burst), and every retry the server saw was granted by the budget."""
    budget = RetryBudget(ratio=0.1, min_per_second=0, burst=3, clock=ManualClock())
    name, barrier, statuses = fresh_name(), threading.Barrier(4), []
    lock = threading.Lock()

    def with_httpx() -> None:
        transport = RetryTransport(clock=RecordingClock(), budget=budget)
        with httpx.Client(transport=transport, timeout=5) as client:
            barrier.wait()
            for _ in range(10):
                status = client.get(failing(throttle_server, name)).status_code
                with lock:
                    statuses.append(status)

    def with_requests() -> None:
        with retry_session(clock=RecordingClock(), budget=budget) as session:
            barrier.wait()
            for _ in range(10):
                status = session.get(failing(throttle_server, name), timeout=5).status_code
                with lock:
                    statuses.append(status)

    threads = [threading.Thread(target=with_httpx) for _ in range(2)]
    threads += [threading.Thread(target=with_requests) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert statuses == [503] * 40
    assert budget.requests == 40
    assert budget.retries in {6, 7}
    assert len(throttle_state.attempts[name]) == 40 + budget.retries
    assert budget.refused >= 1

"""A 429 the client does not retry (a POST without keys, or 429 not in ``statuses``) is no
failure of the host to its circuit: the client did not wait, so it gave up on no wait. One
that no wait can help is a success, as on the retried path. Real uvicorn on loopback."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from ratewarden import CircuitBreaker
from ratewarden.client import RetryPolicy, RetryTransport
from tests.client._fakes import RecordingClock
from tests.client._live import LiveASGI

TOO_LARGE = 'RateLimit:"c";r=10;t=6'


def client(clock: RecordingClock, breaker: CircuitBreaker, **policy: object) -> httpx.Client:
    transport = RetryTransport(
        policy=RetryPolicy(**policy),  # type: ignore[arg-type]
        clock=clock,
        random=lambda: 0.5,
        breaker=breaker,
    )
    return httpx.Client(transport=transport, timeout=5)


def breaker_for(clock: RecordingClock) -> CircuitBreaker:
    """Three failed attempts in a row open a host's circuit for 30 s."""
    return CircuitBreaker(per_node=True, failures=3, failure_ratio=None, cooldown=30, clock=clock)


def test_unkeyed_posts_throttled_do_not_close_the_host(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """Four unkeyed POSTs answered 429 with Retry-After: 1 are returned as they came, and a
    GET to the host still goes out (it was refused for 30 s before)."""
    clock = RecordingClock()
    url = f"{throttle_server.url}/throttle/{fresh_name()}"
    with client(clock, breaker_for(clock)) as http:
        statuses = [
            http.post(url, params={"n": 99, "h": "Retry-After:1"}).status_code for _ in range(4)
        ]
        assert statuses == [429] * 4
        assert http.get(f"{throttle_server.url}/throttle/{fresh_name()}?n=0").status_code == 200
    assert clock.slept == []


def test_a_429_not_in_statuses_is_no_failure(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """With statuses={503}, GETs answered 429 are not retried, and do not open the circuit."""
    clock = RecordingClock()
    url = f"{throttle_server.url}/throttle/{fresh_name()}?n=99&h=Retry-After:5"
    with client(clock, breaker_for(clock), statuses={503}) as http:
        assert [http.get(url).status_code for _ in range(5)] == [429] * 5
    assert clock.slept == []


def test_an_unkeyed_429_no_wait_helps_counts_as_a_success(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """Between 500s, a POST's 429 that no wait can help is a success: it breaks the run, so
    two more 500s (four failures, not three in a row) leave the circuit closed."""
    clock = RecordingClock()
    host = throttle_server.url
    with client(clock, breaker_for(clock), max_attempts=1) as http:
        failing = f"{host}/throttle/{fresh_name()}?n=99&status=500"
        assert [http.get(failing).status_code for _ in range(2)] == [500, 500]
        too_large = http.post(f"{host}/throttle/{fresh_name()}", params={"n": 9, "h": TOO_LARGE})
        assert too_large.status_code == 429
        assert [http.get(failing).status_code for _ in range(2)] == [500, 500]
        assert http.get(f"{host}/throttle/{fresh_name()}?n=0").status_code == 200

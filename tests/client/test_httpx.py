"""RetryTransport / AsyncRetryTransport against a real uvicorn server on loopback.

Sleeps go to a recording ManualClock and chance is fixed, so every wait is exact
and the tests take no real time; the server's answers are real.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from ratewarden.client import (
    AsyncRetryTransport,
    RetriesExhaustedError,
    RetryPolicy,
    RetryTransport,
)
from tests.client._app import ThrottleState
from tests.client._fakes import RecordingClock
from tests.client._live import LiveASGI, free_port


def make_client(
    server: LiveASGI, clock: RecordingClock, policy: RetryPolicy | None = None, **kw: Any
) -> httpx.Client:
    transport = RetryTransport(policy=policy, clock=clock, random=lambda: 0.5, **kw)
    return httpx.Client(base_url=server.url, transport=transport, timeout=5)


def throttled(
    server: LiveASGI, name: str, params: dict[str, Any], policy: RetryPolicy | None = None
) -> tuple[httpx.Response, RecordingClock]:
    """GET /throttle/<name> with ``params`` through a retrying client: the final response,
    and the clock that recorded every sleep."""
    clock = RecordingClock()
    with make_client(server, clock, policy) as client:
        return client.get(f"/throttle/{name}", params=params), clock


def test_retry_after_is_honoured_with_bounded_jitter_above_it(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """Two 429s with Retry-After: 2, then 200: two waits of 2 + 0.5 * 1 s, three attempts."""
    response, clock = throttled(throttle_server, fresh_name(), {"n": 2, "h": "Retry-After:2"})
    assert response.status_code == 200
    assert response.json() == {"attempts": 3}
    assert clock.slept == [2.5, 2.5]


def test_ratelimit_field_is_a_hint_when_retry_after_is_absent(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """RateLimit "q";r=0;t=3 makes the client wait 3 s plus jitter."""
    response, clock = throttled(
        throttle_server, fresh_name(), {"n": 1, "h": 'RateLimit:"q";r=0;t=3'}
    )
    assert response.status_code == 200
    assert clock.slept == [3.5]


def test_without_a_hint_the_backoff_is_exponential_with_full_jitter(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """503 without hints: U * min(cap, 0.5 * 2**n) = 0.25, 0.5, 1.0 for U = 0.5."""
    response, clock = throttled(throttle_server, fresh_name(), {"n": 3, "status": 503})
    assert response.status_code == 200
    assert clock.slept == [0.25, 0.5, 1.0]


def test_malformed_hint_falls_back_to_the_backoff(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """Retry-After: soon is ignored; the first backoff (0.25 s) applies."""
    response, clock = throttled(throttle_server, fresh_name(), {"n": 1, "h": "Retry-After:soon"})
    assert response.status_code == 200
    assert clock.slept == [0.25]


def test_gives_up_with_the_last_response_when_the_wait_cap_would_pass(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """Retry-After: 10 with max_wait=5: no sleep at all, the 429 comes back."""
    name = fresh_name()
    response, clock = throttled(
        throttle_server, name, {"n": 1, "h": "Retry-After:10"}, RetryPolicy(max_wait=5)
    )
    assert response.status_code == 429
    assert response.text == "slow down"
    assert clock.slept == []
    assert len(throttle_state.attempts[name]) == 1


def test_wait_cap_counts_every_sleep_of_the_request(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """Retry-After: 2 (+0.5) three times against max_wait=6: two sleeps fit, the third not."""
    response, clock = throttled(
        throttle_server, fresh_name(), {"n": 5, "h": "Retry-After:2"}, RetryPolicy(max_wait=6)
    )
    assert response.status_code == 429
    assert clock.slept == [2.5, 2.5]


def test_give_up_can_raise_with_the_last_response(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """raise_on_give_up: RetriesExhaustedError says why and carries the read 429."""
    clock, name = RecordingClock(), fresh_name()
    policy = RetryPolicy(max_attempts=2, raise_on_give_up=True)
    with (
        make_client(throttle_server, clock, policy) as client,
        pytest.raises(RetriesExhaustedError, match="after 2 attempts") as info,
    ):
        client.get(f"/throttle/{name}", params={"n": 5, "h": "Retry-After:1"})
    assert info.value.response.status_code == 429
    assert info.value.response.content == b"slow down"
    assert clock.slept == [1.5]


def test_other_statuses_are_not_retried(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """A 500 is the answer, not a reason to retry (only 429 and 503 by default)."""
    name = fresh_name()
    response, _ = throttled(throttle_server, name, {"n": 1, "status": 500})
    assert response.status_code == 500
    assert len(throttle_state.attempts[name]) == 1


def test_post_is_not_retried_by_default(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """POST is not idempotent: one attempt, no Idempotency-Key added."""
    clock, name = RecordingClock(), fresh_name()
    with make_client(throttle_server, clock) as client:
        response = client.post(f"/throttle/{name}", params={"n": 1, "h": "Retry-After:1"})
    assert response.status_code == 429
    assert [a.idempotency_key for a in throttle_state.attempts[name]] == [None]


def test_keyed_post_is_retried_with_one_key_and_the_same_body(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """idempotency_keys: the key is made once, sent on every attempt with the same body."""
    clock, name = RecordingClock(), fresh_name()
    keys = iter(["key-1", "key-2"])
    policy = RetryPolicy(idempotency_keys=True)
    with make_client(throttle_server, clock, policy, key_factory=lambda: next(keys)) as client:
        response = client.post(
            f"/throttle/{name}", params={"n": 2, "h": "Retry-After:1"}, json={"amount": 5}
        )
    assert response.status_code == 200
    attempts = throttle_state.attempts[name]
    assert [a.idempotency_key for a in attempts] == ["key-1"] * 3
    assert {a.body for a in attempts} == {b'{"amount":5}'}


def test_a_callers_own_key_is_kept(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """A request that already has an Idempotency-Key keeps it across retries."""
    clock, name = RecordingClock(), fresh_name()
    with make_client(throttle_server, clock, RetryPolicy(idempotency_keys=True)) as client:
        client.patch(
            f"/throttle/{name}",
            params={"n": 1, "h": "Retry-After:0"},
            headers={"Idempotency-Key": "mine"},
        )
    assert [a.idempotency_key for a in throttle_state.attempts[name]] == ["mine", "mine"]


def test_streamed_body_is_replayed_on_retry(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """A generator body is read once and sent whole on every attempt."""
    clock, name = RecordingClock(), fresh_name()

    def chunks() -> Iterator[bytes]:
        yield b"part1-"
        yield b"part2"

    with make_client(throttle_server, clock, RetryPolicy(idempotency_keys=True)) as client:
        client.post(f"/throttle/{name}", params={"n": 1, "h": "Retry-After:0"}, content=chunks())
    assert [a.body for a in throttle_state.attempts[name]] == [b"part1-part2"] * 2


def test_connection_errors_are_retried_with_backoff_then_raised() -> None:
    """A closed port: four backoffs (0.25, 0.5, 1, 2 s), then the ConnectError itself."""
    clock = RecordingClock()
    transport = RetryTransport(clock=clock, random=lambda: 0.5)
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.ConnectError):
        client.get(f"http://127.0.0.1:{free_port()}/")
    assert clock.slept == [0.25, 0.5, 1.0, 2.0]


def test_connection_errors_can_be_left_alone() -> None:
    """retry_transport_errors=False: the first ConnectError is raised, nothing slept."""
    clock = RecordingClock()
    policy = RetryPolicy(retry_transport_errors=False)
    transport = RetryTransport(policy=policy, clock=clock)
    with httpx.Client(transport=transport) as client, pytest.raises(httpx.ConnectError):
        client.get(f"http://127.0.0.1:{free_port()}/")
    assert clock.slept == []


def test_a_malformed_request_is_not_retried() -> None:
    """An unsupported scheme is a mistake in the request: raised at once, nothing slept."""
    clock = RecordingClock()
    with (
        httpx.Client(transport=RetryTransport(clock=clock)) as client,
        pytest.raises(httpx.UnsupportedProtocol),
    ):
        client.get("ftp://127.0.0.1/")
    assert clock.slept == []


async def test_async_transport_honours_retry_after(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """The asyncio twin waits the same way: Retry-After 2 + 0.25 s of jitter, then 200."""
    clock, name = RecordingClock(), fresh_name()
    transport = AsyncRetryTransport(clock=clock, random=lambda: 0.25)
    async with httpx.AsyncClient(base_url=throttle_server.url, transport=transport) as client:
        response = await client.get(f"/throttle/{name}", params={"n": 1, "h": "Retry-After:2"})
    assert response.status_code == 200
    assert clock.slept == [2.25]


async def test_async_keyed_post_keeps_its_key(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """The asyncio twin attaches one generated key to every attempt of a POST."""
    clock, name = RecordingClock(), fresh_name()
    policy = RetryPolicy(idempotency_keys=True, raise_on_give_up=True)
    transport = AsyncRetryTransport(policy=policy, clock=clock, random=lambda: 0.0)
    async with httpx.AsyncClient(base_url=throttle_server.url, transport=transport) as client:
        response = await client.post(
            f"/throttle/{name}", params={"n": 2, "status": 503}, content=b"x"
        )
    assert response.status_code == 200
    keys = [a.idempotency_key for a in throttle_state.attempts[name]]
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0] is not None


async def test_async_give_up_raises_with_the_read_response(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """The asyncio twin gives up as the blocking one does: the error carries the 429, read."""
    clock, name = RecordingClock(), fresh_name()
    policy = RetryPolicy(max_attempts=2, raise_on_give_up=True)
    transport = AsyncRetryTransport(policy=policy, clock=clock, random=lambda: 0.5)
    async with httpx.AsyncClient(base_url=throttle_server.url, transport=transport) as client:
        with pytest.raises(RetriesExhaustedError, match="after 2 attempts") as info:
            await client.get(f"/throttle/{name}", params={"n": 5, "h": "Retry-After:1"})
    assert info.value.response.status_code == 429
    assert info.value.response.content == b"slow down"
    assert clock.slept == [1.5]


async def test_async_connection_errors_are_retried_with_backoff_then_raised() -> None:
    """The asyncio twin on a closed port: the same four backoffs, then the ConnectError."""
    clock = RecordingClock()
    transport = AsyncRetryTransport(clock=clock, random=lambda: 0.5)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{free_port()}/")
    assert clock.slept == [0.25, 0.5, 1.0, 2.0]

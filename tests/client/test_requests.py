"""retry_session / retry_adapter (requests) against a real uvicorn server on loopback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests

from ratewarden.client import RetriesExhaustedError, RetryPolicy, retry_adapter, retry_session
from tests.client._app import ThrottleState
from tests.client._fakes import RecordingClock
from tests.client._live import LiveASGI, free_port


def keyed_post(
    url: str, key: str, *, clock: RecordingClock | None = None, **options: Any
) -> requests.Response:
    """A POST through ``retry_session`` with Idempotency-Keys on, every generated key ``key``."""
    policy = RetryPolicy(idempotency_keys=True)
    with retry_session(policy, clock=clock or RecordingClock(), key_factory=lambda: key) as s:
        return s.post(url, **options)


def test_session_honours_retry_after(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """Two 429s with Retry-After: 1, then 200: waits of 1 + 0.5 s each."""
    clock, name = RecordingClock(), fresh_name()
    with retry_session(clock=clock, random=lambda: 0.5) as session:
        response = session.get(
            f"{throttle_server.url}/throttle/{name}", params={"n": 2, "h": "Retry-After:1"}
        )
    assert response.status_code == 200
    assert response.json() == {"attempts": 3}
    assert clock.slept == [1.5, 1.5]


def test_session_keyed_post_keeps_one_key(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """POST with idempotency_keys: one generated key and the same body on every attempt."""
    name = fresh_name()
    response = keyed_post(
        f"{throttle_server.url}/throttle/{name}",
        "k-1",
        params={"n": 1, "status": 503},
        data=b"order=7",
    )
    assert response.status_code == 200
    attempts = throttle_state.attempts[name]
    assert [(a.idempotency_key, a.body) for a in attempts] == [("k-1", b"order=7")] * 2


def test_session_post_without_keys_is_sent_once(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """By default a POST is not retried and carries no key."""
    name = fresh_name()
    with retry_session(clock=RecordingClock()) as session:
        response = session.post(f"{throttle_server.url}/throttle/{name}", params={"n": 1})
    assert response.status_code == 429
    assert [a.idempotency_key for a in throttle_state.attempts[name]] == [None]


def test_session_gives_up_past_the_wait_cap_and_can_raise(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """Retry-After: 30 with max_wait=10 and raise_on_give_up: an error naming max_wait."""
    clock, name = RecordingClock(), fresh_name()
    policy = RetryPolicy(max_wait=10, raise_on_give_up=True)
    url = f"{throttle_server.url}/throttle/{name}"
    with (
        retry_session(policy, clock=clock) as session,
        pytest.raises(RetriesExhaustedError, match="max_wait=10") as info,
    ):
        session.get(url, params={"n": 1, "h": "Retry-After:30"})
    assert info.value.response.status_code == 429
    assert clock.slept == []


def test_adapter_mounts_on_an_existing_session(
    throttle_server: LiveASGI, fresh_name: Callable[[], str]
) -> None:
    """retry_adapter works on a session the caller built, with its own headers."""
    clock, name = RecordingClock(), fresh_name()
    with requests.Session() as session:
        session.headers["User-Agent"] = "ratewarden-test"
        session.mount("http://", retry_adapter(clock=clock, random=lambda: 0.0))
        response = session.get(
            f"{throttle_server.url}/throttle/{name}", params={"n": 1, "status": 503}
        )
    assert response.status_code == 200
    assert clock.slept == [0.0]


def test_session_retries_connection_errors_then_raises() -> None:
    """A closed port: backoffs of 0.25, 0.5, 1, 2 s, then requests' ConnectionError."""
    clock = RecordingClock()
    with (
        retry_session(clock=clock, random=lambda: 0.5) as session,
        pytest.raises(requests.ConnectionError),
    ):
        session.get(f"http://127.0.0.1:{free_port()}/")
    assert clock.slept == [0.25, 0.5, 1.0, 2.0]


def test_session_sends_a_generator_body_once(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """A generator body cannot be sent twice: a keyed POST with one is sent once, key and all."""
    clock, name = RecordingClock(), fresh_name()
    response = keyed_post(
        f"{throttle_server.url}/throttle/{name}",
        "k-9",
        clock=clock,
        params={"n": 1, "h": "Retry-After:0"},
        data=(chunk for chunk in [b"part1-", b"part2"]),
    )
    assert response.status_code == 429
    assert [a.idempotency_key for a in throttle_state.attempts[name]] == ["k-9"]
    assert clock.slept == []

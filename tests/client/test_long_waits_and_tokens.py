"""A Retry-After of any length, any method token in a policy, and the give-up signal's rank.

- HTTP's delay-seconds has no length limit: a server asking for more seconds than fit in 15
  digits asks for longer than any ``max_wait``, so the client gives up at once rather than
  reading "no hint" and backing off into it again.
- ``RetryPolicy(methods=...)`` takes any HTTP method token (RFC 9110), as the middleware's
  rules do: ``M-SEARCH`` is one.
- A 429 whose ``RateLimit`` field reports quota left for every policy, with no
  ``Retry-After``, is given up on even beside a legacy ``X-RateLimit-Reset``: the
  ``RateLimit`` field outranks the legacy headers, as client.md's table says.

HTTP against a real uvicorn server on loopback; sleeps recorded, not slept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from ratewarden.client import RetriesExhaustedError, RetryPolicy, RetryTransport, retry_hint
from ratewarden.errors import ConfigurationError
from tests.client._app import ThrottleState
from tests.client._fakes import RecordingClock
from tests.client._live import LiveASGI

NOW = 1_700_000_000.0


@pytest.mark.parametrize("digits", [16, 20, 400, 5000])
def test_a_retry_after_past_15_digits_is_a_very_long_wait(digits: int) -> None:
    """Read as the longest wait the client counts (finite, past any sensible max_wait)."""
    hint = retry_hint({"Retry-After": "9" * digits}, NOW)
    assert hint is not None and hint >= 10.0**14


def test_leading_zeros_do_not_make_a_retry_after_long() -> None:
    """Only significant digits count: twenty characters of ``0...05`` are five seconds."""
    assert retry_hint({"Retry-After": "0" * 19 + "5"}, NOW) == 5.0
    assert retry_hint({"Retry-After": "0" * 19 + "5.25"}, NOW) == 5.25
    assert retry_hint({"Retry-After": "0" * 30}, NOW) == 0.0


def test_a_ratelimit_number_past_15_digits_is_still_malformed() -> None:
    """The RateLimit field's numbers are sf-integers (15 digits at most): longer is no hint."""
    assert retry_hint({"RateLimit": '"q";r=0;t=' + "9" * 16}, NOW) is None


@pytest.mark.parametrize("digits", [16, 20, 400])
def test_the_client_gives_up_at_once_on_a_very_long_retry_after(
    throttle_server: LiveASGI,
    throttle_state: ThrottleState,
    fresh_name: Callable[[], str],
    digits: int,
) -> None:
    """One attempt, no sleep, and the reason names max_wait."""
    name = fresh_name()
    clock = RecordingClock()
    policy = RetryPolicy(raise_on_give_up=True)
    transport = RetryTransport(policy=policy, clock=clock, random=lambda: 0.5)
    with (
        httpx.Client(base_url=throttle_server.url, transport=transport) as client,
        pytest.raises(RetriesExhaustedError, match="would pass max_wait=60 s"),
    ):
        client.get(f"/throttle/{name}", params={"n": 5, "h": f"Retry-After:{'9' * digits}"})
    assert len(throttle_state.attempts[name]) == 1
    assert clock.slept == []


@pytest.mark.parametrize("method", ["M-SEARCH", "purge", "X_CUSTOM", "QUERY", "GETS"])
def test_any_method_token_is_taken(method: str) -> None:
    """Tokens, not only letters: upper-cased, as the other method names."""
    assert RetryPolicy(methods={method}).methods == frozenset({method.upper()})


async def _search_once_throttled(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """ASGI: records each request's method; the first is a 429 with Retry-After: 1."""
    if scope["type"] != "http":
        return
    SEEN.append(scope["method"])
    status, headers = (429, [(b"retry-after", b"1")]) if len(SEEN) == 1 else (200, [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


SEEN: list[str] = []


@pytest.fixture
def search_server() -> Iterator[LiveASGI]:
    """``_search_once_throttled`` under uvicorn on 127.0.0.1."""
    SEEN.clear()
    server = LiveASGI(_search_once_throttled)
    yield server
    server.stop()


def test_a_token_method_is_retried(search_server: LiveASGI) -> None:
    """``methods={"M-SEARCH"}``: a 429 to an M-SEARCH is waited out and sent again."""
    clock = RecordingClock()
    transport = RetryTransport(
        policy=RetryPolicy(methods={"M-SEARCH"}), clock=clock, random=lambda: 0.5
    )
    with httpx.Client(base_url=search_server.url, transport=transport) as client:
        response = client.request("M-SEARCH", "/")
    assert response.status_code == 200
    assert SEEN == ["M-SEARCH", "M-SEARCH"]
    assert clock.slept == [1.5]


@pytest.mark.parametrize(
    ("method", "words"),
    [
        ("G T", r"'G T': each must be a method name, an HTTP token such as 'GET'"),
        ("GET ", r"did you mean 'GET'\?"),
        ("P0ST/", r"did you mean 'POST'\?"),
        (5, r"has 5: each must be a method name"),
        ("", r"has '': each must be a method name"),
    ],
)
def test_a_method_that_is_no_token_is_refused(method: object, words: str) -> None:
    """Not a token: refused, with the nearest known method when there is one."""
    with pytest.raises(ConfigurationError, match=words):
        RetryPolicy(methods={method})  # type: ignore[arg-type]


def test_quota_left_everywhere_gives_up_despite_a_legacy_reset(
    throttle_server: LiveASGI, throttle_state: ThrottleState, fresh_name: Callable[[], str]
) -> None:
    """No Retry-After, ``"c";r=10;t=6`` and a bare ``X-RateLimit-Reset: 3``: the RateLimit
    field says no wait helps, and it outranks the legacy reset, so there is one attempt."""
    name = fresh_name()
    clock = RecordingClock()
    transport = RetryTransport(clock=clock, random=lambda: 0.5)
    headers = ['RateLimit:"c";r=10;t=6', "X-RateLimit-Reset:3"]
    with httpx.Client(base_url=throttle_server.url, transport=transport) as client:
        response = client.get(f"/throttle/{name}", params={"n": 5, "h": headers})
    assert response.status_code == 429
    assert len(throttle_state.attempts[name]) == 1
    assert clock.slept == []

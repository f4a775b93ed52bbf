"""Provider-style headers for a budget decision, next to the IETF RateLimit fields."""

from __future__ import annotations

from ratewarden import MemoryStore
from ratewarden.budgets import TokenBudget, format_duration, provider_headers
from ratewarden.testing import ManualClock


def test_headers_of_an_allowed_reservation() -> None:
    """Limits, remaining and resets per axis, and the IETF fields with qu set to the unit."""
    budget = TokenBudget(
        MemoryStore(clock=ManualClock()),
        {"requests": "500/minute", "tokens": "100000/minute", "images": "10/hour"},
        max_output_tokens=4000,
    )
    reservation = budget.reserve("k", input_tokens=200, units={"images": 1})
    headers = dict(provider_headers(reservation.decision))
    assert headers["x-ratelimit-limit-requests"] == "500"
    assert headers["x-ratelimit-remaining-requests"] == "499"
    assert headers["x-ratelimit-reset-requests"] == "120ms"
    assert headers["x-ratelimit-limit-tokens"] == "100000"
    assert headers["x-ratelimit-remaining-tokens"] == "95800"
    assert headers["x-ratelimit-reset-tokens"] == "2.52s"
    assert headers["x-ratelimit-reset-images"] == "6m0s"
    assert headers["RateLimit-Policy"] == (
        '"requests";q=500;w=60;qu="requests", "tokens";q=100000;w=60;qu="tokens", '
        '"images";q=10;w=3600;qu="images"'
    )
    # t is the effective window, the next unit of each axis: 0.12 s, 0.6 ms and 360 s (the
    # resets above are the times until full instead).
    assert headers["RateLimit"] == '"requests";r=499;t=1, "tokens";r=95800;t=1, "images";r=9;t=360'
    assert "Retry-After" not in headers


def test_headers_of_a_denial_carry_retry_after_rounded_up() -> None:
    """A denial says when to come back, in whole seconds never early; IETF fields can be off."""
    budget = TokenBudget(
        MemoryStore(clock=ManualClock()), {"tokens": "1000/minute"}, max_output_tokens=0
    )
    budget.reserve("k", input_tokens=1000)
    denied = budget.reserve("k", input_tokens=10)
    headers = dict(provider_headers(denied.decision, ietf=False))
    assert headers["Retry-After"] == "1"  # 0.6 s
    assert headers["x-ratelimit-remaining-tokens"] == "0"
    assert "RateLimit" not in headers


def test_format_duration_is_go_style_and_never_short() -> None:
    """Durations read like the providers' (ms below a second, then h/m/s), rounded up."""
    assert [format_duration(s) for s in (0, 0.0201, 1, 1.5, 61.5, 3600, 3661.0004)] == [
        "0s",
        "21ms",
        "1s",
        "1.5s",
        "1m1.5s",
        "1h0m0s",
        "1h1m1.001s",
    ]

"""The concurrency middlewares: a ttl bound the same as every other slot taker's (1 ms to 365
days, both included), and a constructor that speaks with the name the caller used."""

from __future__ import annotations

import pytest

from ratewarden import AsyncLimiter, ConfigurationError, Limiter
from ratewarden.checks import MAX_LEASE_SECONDS
from ratewarden.middleware import (
    ConcurrencyMiddleware,
    SlotPolicy,
    WSGIConcurrencyMiddleware,
)


def test_a_ttl_of_exactly_365_days_is_taken_as_acquire_slot_takes_it() -> None:
    """31,536,000 s is acquire_slot's longest ttl: the middleware and SlotPolicy take it too."""
    assert SlotPolicy(limit=1, ttl=MAX_LEASE_SECONDS).ttl == 31_536_000.0
    middleware = WSGIConcurrencyMiddleware(
        lambda *a: [], limiter=Limiter(), limit=1, ttl=MAX_LEASE_SECONDS
    )
    assert middleware.policy.ttl == MAX_LEASE_SECONDS


@pytest.mark.parametrize("ttl", [MAX_LEASE_SECONDS + 0.5, 0.0005, float("nan"), True, "30"])
def test_a_ttl_outside_1ms_to_365_days_is_refused_with_both_bounds(ttl: object) -> None:
    """Past the bound, under 1 ms, not a number: the message states the real bounds."""
    with pytest.raises(ConfigurationError) as raised:
        SlotPolicy(limit=1, ttl=ttl)  # type: ignore[arg-type]
    assert f"concurrency middleware ttl={ttl!r}: seconds, at least 0.001" in str(raised.value)
    assert "at most 365 days (31,536,000, as acquire_slot's)" in str(raised.value)


@pytest.mark.parametrize(
    ("middleware", "limiter"),
    [(ConcurrencyMiddleware, AsyncLimiter), (WSGIConcurrencyMiddleware, Limiter)],
)
def test_a_missing_app_or_limiter_names_the_class_built(middleware: type, limiter: type) -> None:
    """Python's TypeError for a missing argument names the public class, not _SlotMiddleware."""
    name = middleware.__name__
    with pytest.raises(TypeError) as raised:
        middleware(limiter=limiter(), limit=1)
    assert str(raised.value) == f"{name}() missing 1 required positional argument: 'app'"
    with pytest.raises(TypeError) as raised:
        middleware(lambda *a: None, limit=1)
    assert str(raised.value) == f"{name}() missing 1 required keyword-only argument: 'limiter'"


def test_a_second_positional_argument_is_refused_naming_the_class() -> None:
    """The limiter given positionally is refused with what to write instead."""
    with pytest.raises(ConfigurationError) as raised:
        WSGIConcurrencyMiddleware(lambda *a: None, Limiter(), limit=1)  # type: ignore[misc]
    assert str(raised.value) == (
        "WSGIConcurrencyMiddleware: 2 positional arguments given, but it takes at most 1 (app); "
        "give the rest by keyword (limiter=..., limit=...)"
    )

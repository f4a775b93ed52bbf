"""Retry-After sent twice (a proxy and the app both set it) reaches the client as one
value joined with commas: it is read as the longest wait it holds, not as malformed."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

from ratewarden.client._hints import retry_hint

NOW = 1_700_000_000.0


def date_in(seconds: float) -> str:
    """An HTTP-date ``seconds`` after NOW (an HTTP-date has a comma of its own)."""
    return format_datetime(datetime.fromtimestamp(NOW + seconds, UTC), usegmt=True)


def test_equal_values_joined_are_that_value() -> None:
    """``120, 120`` is 120 s (it was no hint: a 0.25 s backoff instead of 120 s)."""
    assert retry_hint({"Retry-After": "120, 120"}, NOW) == 120.0
    assert retry_hint({"Retry-After": "120,120"}, NOW) == 120.0


def test_different_values_joined_are_the_longest() -> None:
    """Neither sender is answered early: the longest wait wins, dates and delays alike."""
    assert retry_hint({"Retry-After": "1, 2"}, NOW) == 2.0
    assert retry_hint({"Retry-After": f"{date_in(30)}, {date_in(30)}"}, NOW) == 30.0
    assert retry_hint({"Retry-After": f"5, {date_in(30)}"}, NOW) == 30.0
    assert retry_hint({"Retry-After": f"{date_in(7)}, 40"}, NOW) == 40.0


def test_a_joined_value_with_a_bad_part_falls_through() -> None:
    """One unreadable part makes the whole malformed: the RateLimit field speaks."""
    for bad in ("soon, 5", "5,", ",", "Wed, 5", "5, -1"):
        headers = {"Retry-After": bad, "RateLimit": '"q";r=0;t=6'}
        assert retry_hint(headers, NOW) == 6.0, bad

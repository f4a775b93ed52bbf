"""The backoff formula and the policy's checks, as pure logic (fake random, no I/O)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratewarden.client import RetryPolicy, backoff_delay
from ratewarden.errors import ConfigurationError


def test_full_jitter_ceiling_doubles_up_to_the_cap() -> None:
    """With U close to 1 the wait approaches min(cap, base * 2**n): 0.5, 1, 2, 4, 8, 8."""
    policy = RetryPolicy(backoff_base=0.5, backoff_cap=8.0)
    ceilings = [policy.delay(n, None, 1.0) for n in range(6)]
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]


def test_full_jitter_scales_with_u() -> None:
    """Full jitter: the wait is U times the ceiling, so it can be anywhere from 0 up."""
    assert backoff_delay(3, 0.5, 30.0, 0.25) == 1.0
    assert backoff_delay(3, 0.5, 30.0, 0.0) == 0.0


def test_huge_retry_numbers_stay_at_the_cap() -> None:
    """2**n would overflow a float; the cap holds instead."""
    assert backoff_delay(5000, 0.5, 30.0, 0.5) == 15.0


@given(
    hint=st.floats(min_value=0, max_value=1e6),
    u=st.floats(min_value=0, max_value=1, exclude_max=True),
    jitter=st.floats(min_value=0, max_value=10),
    retry=st.integers(min_value=0, max_value=100),
)
def test_hinted_wait_is_never_earlier_than_the_hint_and_bounded_above(
    hint: float, u: float, jitter: float, retry: int
) -> None:
    """hint <= wait <= hint + hint_jitter, whichever retry it is."""
    wait = RetryPolicy(hint_jitter=jitter).delay(retry, hint, u)
    assert hint <= wait <= hint + jitter


def test_random_outside_unit_interval_is_clamped() -> None:
    """A bad injected random source cannot make a wait negative or past its bound."""
    policy = RetryPolicy(hint_jitter=1.0)
    assert policy.delay(0, 2.0, -5.0) == 2.0
    assert policy.delay(0, 2.0, 7.0) == 3.0
    assert policy.delay(0, 2.0, float("nan")) == 2.0
    assert policy.delay(2, None, float("nan")) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"max_attempts": 0}, "max_attempts=0"),
        ({"max_attempts": 2.5}, "max_attempts=2.5"),
        ({"backoff_base": -1}, "backoff_base=-1"),
        ({"backoff_cap": float("inf")}, "backoff_cap=inf"),
        ({"max_wait": 0}, "max_wait=0"),
        ({"hint_jitter": float("nan")}, "hint_jitter=nan"),
        ({"statuses": {429, 700}}, "700"),
        ({"methods": "GET"}, "not one string"),
        ({"statuses": "429"}, "statuses='429': pass a set of HTTP statuses"),
        ({"statuses": 429}, "statuses=429: pass a set of HTTP statuses"),
        ({"methods": {"GET", "G T"}}, "'G T'"),
        ({"backoff_base": 5, "backoff_cap": 1}, "backoff_cap=1 is below backoff_base=5"),
        ({"backoff_base": 60}, "backoff_cap=30 is below backoff_base=60"),
        ({"idempotency_keys": "false"}, "RetryPolicy.idempotency_keys 'false' must be True or"),
        ({"raise_on_give_up": "no"}, "RetryPolicy.raise_on_give_up 'no' must be True or False"),
        ({"retry_transport_errors": 0}, "RetryPolicy.retry_transport_errors 0 must be True"),
        ({"idempotency_keys": None}, "RetryPolicy.idempotency_keys None must be True or False"),
    ],
)
def test_bad_policy_values_name_the_field(kwargs: dict[str, object], words: str) -> None:
    """Each bad value raises ConfigurationError naming the field and the value."""
    with pytest.raises(ConfigurationError, match=words.replace("(", r"\(")):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_a_cap_equal_to_the_base_is_a_constant_ceiling() -> None:
    """backoff_cap == backoff_base is allowed: every ceiling is the base."""
    policy = RetryPolicy(backoff_base=2, backoff_cap=2)
    assert [policy.delay(n, None, 0.5) for n in range(3)] == [1.0, 1.0, 1.0]


def test_policy_normalises_methods_and_statuses() -> None:
    """Lower-case methods and lists of statuses become frozen sets."""
    policy = RetryPolicy(methods=["get", "put"], statuses=[429])  # type: ignore[arg-type]
    assert policy.methods == frozenset({"GET", "PUT"})
    assert policy.statuses == frozenset({429})

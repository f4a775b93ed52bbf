"""Concurrency slots: leases, TTL recovery from crashed holders, and the Lua twin."""

from __future__ import annotations

import math
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratewarden import Limiter, MemoryStore
from ratewarden.algorithms import concurrency
from ratewarden.errors import ConfigurationError
from ratewarden.storage import _decisions, _plan
from ratewarden.storage._scripts import script
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._differential import START_US
from tests._servers import STORE_TIMEOUT

SECOND = 1_000_000


def make_limiter() -> tuple[Limiter, ManualClock]:
    clock = ManualClock()
    return Limiter(MemoryStore(clock=clock)), clock


def test_limit_slots_in_flight_then_denied_until_release() -> None:
    """Three slots: three leases are granted, the fourth waits for a release."""
    limiter, _ = make_limiter()
    leases = [limiter.acquire_slot("gpu", 3, ttl=30) for _ in range(4)]
    assert [lease.allowed for lease in leases] == [True, True, True, False]
    assert leases[2].decision.remaining == 0
    assert leases[3].decision.retry_after == 30.0
    assert limiter.release_slot(leases[0])
    assert limiter.acquire_slot("gpu", 3, ttl=30).allowed


def test_crashed_holder_slots_come_back_after_ttl() -> None:
    """A holder that never releases loses its slot once its lease expires."""
    limiter, clock = make_limiter()
    assert limiter.acquire_slot("job", 1, ttl=10).allowed
    assert not limiter.acquire_slot("job", 1, ttl=10).allowed
    clock.advance(10)
    assert limiter.acquire_slot("job", 1, ttl=10).allowed


def test_renewed_lease_outlives_its_first_ttl() -> None:
    """Renewing moves the expiry to now + ttl; a lapsed lease cannot be renewed."""
    limiter, clock = make_limiter()
    lease = limiter.acquire_slot("stream", 1, ttl=10)
    clock.advance(8)
    assert limiter.renew_slot(lease)
    clock.advance(8)
    assert not limiter.acquire_slot("stream", 1, ttl=10).allowed
    clock.advance(3)
    assert not limiter.renew_slot(lease)
    assert limiter.acquire_slot("stream", 1, ttl=10).allowed


def test_same_lease_id_acquires_once() -> None:
    """A retried acquire with the same lease id does not take a second slot."""
    limiter, _ = make_limiter()
    first = limiter.acquire_slot("k", 2, lease_id="req-1")
    again = limiter.acquire_slot("k", 2, lease_id="req-1")
    assert first.allowed and again.allowed
    assert again.decision.remaining == 1


def test_context_manager_releases_on_exit_even_after_an_error() -> None:
    """``with limiter.slot(...)`` gives the slot back when the block raises."""
    limiter, _ = make_limiter()
    with pytest.raises(RuntimeError), limiter.slot("k", 1) as lease:
        assert lease.allowed
        raise RuntimeError("work failed")
    assert limiter.acquire_slot("k", 1).allowed


def test_denied_lease_is_not_released_and_more_slots_than_limit_never_fit() -> None:
    """Releasing a denied lease is a no-op; more slots than the limit can never be granted."""
    limiter, _ = make_limiter()
    held = limiter.acquire_slot("k", 2, slots=2)
    denied = limiter.acquire_slot("k", 2)
    assert not limiter.release_slot(denied)
    assert held.allowed and not denied.allowed
    too_big = limiter.acquire_slot("k", 2, slots=3)
    assert math.isinf(too_big.decision.retry_after)


@pytest.mark.parametrize(
    ("limit", "slots", "ttl"),
    [(0, 1, 1.0), (2, 0, 1.0), (2, 1, 0), (2, 1, -1.0), (True, 1, 1.0), (2, 1.5, 1.0)],
)
def test_bad_slot_requests_raise_configuration_error(limit: Any, slots: Any, ttl: Any) -> None:
    """Zero or negative limits, slots or TTLs are rejected before any state changes."""
    limiter, _ = make_limiter()
    with pytest.raises(ConfigurationError):
        limiter.acquire_slot("k", limit, slots=slots, ttl=ttl)
    assert len(limiter.store) == 0  # type: ignore[arg-type]


@pytest.mark.parametrize("where", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_a_lease_asking_for_more_slots_waits_only_for_the_others(
    where: str, request: pytest.FixtureRequest
) -> None:
    """Limit 2: lease A holds 1 slot for 120 s, lease B 1 for 10 s. A asking for 2 needs only
    B's slot back (its own are replaced by the ones it asks for, not added): retry_after is
    10 s, not 120 s (A's own lease counted against it); refused 1 us before, granted at it."""
    clock = ManualClock()
    if where == "redis":
        client: redis.Redis = request.getfixturevalue("redis_client")
        limiter = Limiter(RedisStore(client, clock=clock, timeout=STORE_TIMEOUT))
    else:
        limiter = Limiter(MemoryStore(clock=clock))
    assert limiter.acquire_slot("jobs", 2, slots=1, ttl=120, lease_id="A").allowed
    assert limiter.acquire_slot("jobs", 2, slots=1, ttl=10, lease_id="B").allowed
    more = limiter.acquire_slot("jobs", 2, slots=2, ttl=120, lease_id="A")
    assert not more.allowed
    assert more.decision.retry_after == 10.0
    clock.advance_us(10 * SECOND - 1)
    assert not limiter.acquire_slot("jobs", 2, slots=2, ttl=120, lease_id="A").allowed
    clock.advance_us(1)
    assert limiter.acquire_slot("jobs", 2, slots=2, ttl=120, lease_id="A").allowed


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(1, 4),
    leases=st.lists(
        st.tuples(
            st.integers(0, 3 * SECOND),  # microseconds before this acquire
            st.integers(0, 3),  # lease index
            st.integers(1, 3),  # slots
            st.integers(1, 5 * SECOND),  # ttl_us
        ),
        max_size=8,
    ),
    index=st.integers(0, 4),
    slots=st.integers(1, 4),
    ttl_us=st.integers(1, 5 * SECOND),
)
def test_a_denied_acquire_is_granted_exactly_at_its_retry_after(
    limit: int, leases: list[tuple[int, int, int, int]], index: int, slots: int, ttl_us: int
) -> None:
    """Any leases held, then an acquire under a held lease id or a new one: denied (and
    possible at all), it is refused 1 us before retry_after and granted at it, no lease
    released early."""
    clock = ManualClock()
    store = MemoryStore(clock=clock)
    for step_us, i, held, lease_ttl in leases:
        clock.advance_us(step_us)
        store.acquire_slot("k", limit, f"lease-{i}", held, lease_ttl)
    lease_id = f"lease-{index}"
    denied = store.acquire_slot("k", limit, lease_id, slots, ttl_us)
    if denied.allowed or math.isinf(denied.retry_after):
        return
    wait_us = round(denied.retry_after * SECOND)
    clock.advance_us(wait_us - 1)
    assert not store.acquire_slot("k", limit, lease_id, slots, ttl_us).allowed
    clock.advance_us(1)
    assert store.acquire_slot("k", limit, lease_id, slots, ttl_us).allowed


# --- the Lua twin ---------------------------------------------------------------------------------


def test_refill_after_is_when_the_soonest_lease_lapses() -> None:
    """Limit 3: a 30 s lease at 0 s (then 2 left, taken under 30 s leases too: 30 s), a 60 s lease
    at 5 s (the last slot taken now lapses at 65 s, the first lease at 30 s: 25 s). Nothing
    held: the acquire's own TTL. Three held against a limit lowered to 1: all must lapse."""
    first, state, _ = concurrency.acquire(None, 0, 3, "a", 1, 30 * SECOND)
    assert (first.remaining, first.refill_after_us) == (2, 30 * SECOND)
    second, state, _ = concurrency.acquire(state, 5 * SECOND, 3, "b", 1, 60 * SECOND)
    assert (second.remaining, second.refill_after_us) == (1, 25 * SECOND)
    never, _, _ = concurrency.acquire(None, 0, 3, "c", 4, 10 * SECOND)
    assert not never.allowed and never.refill_after_us == 10 * SECOND
    _, state, _ = concurrency.acquire(state, 6 * SECOND, 3, "c", 1, 40 * SECOND)
    lowered, _, _ = concurrency.acquire(state, 6 * SECOND, 1, "d", 1, 5 * SECOND)
    assert not lowered.allowed and lowered.refill_after_us == 59 * SECOND  # b's, at 65 s


OPS = st.lists(
    st.tuples(
        st.sampled_from([0, 1, 250_000, SECOND, 5 * SECOND]),
        st.sampled_from(["acquire", "acquire", "release", "renew"]),
        st.integers(0, 4),  # lease index
        st.integers(1, 4),  # slots
        st.sampled_from([SECOND, 3 * SECOND, 10 * SECOND]),  # ttl
        # An acquire under a lowered limit: more slots may then be held than it allows.
        st.sampled_from([0, 0, 0, 1, 2]),
    ),
    min_size=1,
    max_size=30,
)
Ops = list[tuple[int, str, int, int, int, int]]


def run_python(limit: int, ops: Ops) -> list[object]:
    state: Any = None
    now = START_US
    results: list[object] = []
    for dt, op, index, slots, ttl, lowered in ops:
        now += dt
        lease_id = f"lease-{index}"
        if op == "acquire":
            at = max(1, limit - lowered)
            outcome, state, _ = concurrency.acquire(state, now, at, lease_id, slots, ttl)
            results.append(_decisions.slot_decision(at, slots, outcome))
        elif op == "release":
            held, state, _ = concurrency.release(state, now, lease_id)
            results.append(held)
        else:
            held, state, _ = concurrency.renew(state, now, lease_id, ttl)
            results.append(held)
    return results


def run_lua(
    client: redis.Redis | redis.RedisCluster,
    key: str,
    limit: int,
    ops: Ops,
) -> list[object]:
    source = script("concurrency").source
    state_key = _plan.slot_key("rw", key)
    now = START_US
    results: list[object] = []
    for dt, op, index, slots, ttl, lowered in ops:
        now += dt
        at = max(1, limit - lowered)
        argv = _plan.slot_argv(now, op, f"lease-{index}", at, slots, ttl)
        reply = client.eval(source, 1, state_key, *argv)
        results.append(
            _decisions.parse_acquire(at, slots, reply) if op == "acquire" else bool(reply[1])
        )
    return results


@pytest.mark.redis
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(limit=st.integers(1, 5), ops=OPS)
def test_lua_twin_matches_python_on_redis(redis_client: redis.Redis, limit: int, ops: Ops) -> None:
    """Any sequence of acquire/release/renew gives the same answers in Lua and Python, an
    acquire's effective window included, also under a limit lowered below what is held."""
    redis_client.flushall()
    assert run_lua(redis_client, "tenant:1", limit, ops) == run_python(limit, ops)


@pytest.mark.redis
@pytest.mark.cluster
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(limit=st.integers(1, 5), ops=OPS)
def test_lua_twin_matches_python_on_cluster(
    cluster_client: redis.RedisCluster, limit: int, ops: Ops
) -> None:
    """Same on a 3-primary Cluster."""
    cluster_client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    assert run_lua(cluster_client, "tenant:{1}", limit, ops) == run_python(limit, ops)

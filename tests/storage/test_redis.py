"""RedisStore: decisions, layering, expiry and recovery, on a server and on a Cluster."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import redis

from ratewarden import Limiter, Rate
from ratewarden.algorithms import ALGORITHMS
from ratewarden.algorithms._base import layered
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.storage._plan import build
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import STORE_TIMEOUT
from tests.storage.conftest import Client, all_keys, flush_scripts

pytestmark = pytest.mark.redis

WORKED = Rate.parse("100/minute", burst=20)


def test_worked_gcra_example_with_an_injected_clock(client: Client) -> None:
    """100/minute burst 20: 20 pass, the 21st waits exactly 0.6 s, then one more passes."""
    clock = ManualClock()
    limiter = Limiter(RedisStore(client, clock=clock, timeout=STORE_TIMEOUT))
    decisions = [limiter.hit("user:1", WORKED) for _ in range(21)]
    assert [d.allowed for d in decisions] == [True] * 20 + [False]
    assert decisions[19].remaining == 0
    assert decisions[20].retry_after == 0.6
    assert decisions[20].reset_after == 12.0
    clock.advance(0.6)
    assert limiter.hit("user:1", WORKED).allowed
    assert not limiter.hit("user:1", WORKED).allowed


def test_worked_example_on_redis_time(client: Client) -> None:
    """Without a clock the script reads Redis TIME: 20 pass back to back, the 21st is denied."""
    limiter = Limiter(RedisStore(client, timeout=STORE_TIMEOUT))
    decisions = [limiter.hit("user:1", WORKED) for _ in range(21)]
    assert [d.allowed for d in decisions] == [True] * 20 + [False]
    # Real time passed between the calls, so the wait is a little under 0.6 s.
    assert 0.5 < decisions[20].retry_after <= 0.6


def test_a_denying_layer_consumes_nothing_from_the_others(client: Client) -> None:
    """Layered limits are all or nothing: a layer's denial leaves the other layers untouched."""
    clock = ManualClock()
    limiter = Limiter(RedisStore(client, clock=clock, timeout=STORE_TIMEOUT))
    per_second, per_minute = Rate.parse("2/second"), Rate.parse("5/minute")
    layers = [per_second, per_minute]
    assert limiter.hit("k", layers).allowed
    assert limiter.hit("k", layers).allowed
    denied = limiter.hit("k", layers)
    assert not denied.allowed
    assert denied.rate == per_second
    # The per-minute layer still has 3 of 5: the denied request took nothing from it.
    assert limiter.peek("k", per_minute).remaining == 3
    clock.advance(1)
    assert [limiter.hit("k", layers).allowed for _ in range(4)] == [True, True, False, False]
    assert limiter.peek("k", per_minute).remaining == 1


TTL_RATES = [Rate.parse("3/second"), Rate.parse("10/7s"), Rate.parse("50/minute")]


def reference_ttls_ms(algorithm: str, rates: list[Rate], hits: int, now_us: int) -> dict[str, int]:
    """What the pure algorithm says each key should live after ``hits`` hits at ``now_us``."""
    states: dict[str, Any] = {}
    ttls: dict[str, int] = {}
    plan = build(algorithm, "rw", "ttl-key", rates, 1)
    for _ in range(hits):
        current = [states.get(k) for k in plan.keys]
        _outcomes, writes = layered(plan.algorithm.check, plan.params, current, now_us, 1)
        assert writes is not None
        for key, (state, ttl_us) in zip(plan.keys, writes, strict=True):
            states[key], ttls[key] = state, math.ceil(ttl_us / 1000)
    return ttls


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_key_a_decision_writes_has_the_ttl_its_algorithm_gives(
    client: Client, algorithm: str
) -> None:
    """Each written key has a PTTL above 0 and at most the pure algorithm's time to live."""
    clock = ManualClock()
    store = RedisStore(client, clock=clock, timeout=STORE_TIMEOUT)
    for _ in range(3):
        assert store.hit(algorithm, "ttl-key", TTL_RATES).allowed
    expected = reference_ttls_ms(algorithm, TTL_RATES, 3, clock.now_us())
    assert sorted(all_keys(client)) == sorted(k.encode() for k in expected)
    for key, ttl_ms in expected.items():
        assert 0 < client.pttl(key) <= ttl_ms


def test_gcra_keys_live_no_longer_than_the_longest_period(client: Client) -> None:
    """GCRA state expires when the key is full again: within the longest period (ms)."""
    store = RedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    for _ in range(3):
        store.hit("gcra", "ttl-key", TTL_RATES)
    longest_ms = math.ceil(max(r.period_us for r in TTL_RATES) / 1000)
    keys = all_keys(client)
    assert len(keys) == len(TTL_RATES)
    for key in keys:
        assert 0 < client.pttl(key) <= longest_ms


def test_keys_of_a_short_real_rate_are_gone_after_it_passes(client: Client) -> None:
    """5 per 200 ms on Redis TIME: once the period has passed no ratewarden key remains."""
    store = RedisStore(client, timeout=STORE_TIMEOUT)
    rate = Rate.parse("5/200ms")
    for key in ("a", "b", "c"):
        for _ in range(6):
            store.hit("gcra", key, rate)
    assert all_keys(client)
    # The one real wait in the suite: key expiry is the server's own clock.
    deadline = time.monotonic() + 1.0
    while all_keys(client) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all_keys(client) == []


def test_a_flushed_script_cache_is_reloaded_on_the_next_hit(client: Client) -> None:
    """After SCRIPT FLUSH (as after a restart or failover) the next hit reloads and decides."""
    store = RedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert store.hit("gcra", "k", WORKED).remaining == 19
    flush_scripts(client)
    assert store.hit("gcra", "k", WORKED).remaining == 18
    assert store.hit("gcra", "k", WORKED).remaining == 17


def test_reset_forgets_the_usage_of_every_layer(client: Client) -> None:
    """reset deletes the state of each rate, so the key starts full again."""
    store = RedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    rates = [Rate.parse("2/second"), Rate.parse("5/minute")]
    store.hit("gcra", "k", rates, cost=2)
    assert not store.hit("gcra", "k", rates).allowed
    store.reset("gcra", "k", rates)
    assert all_keys(client) == []
    assert store.hit("gcra", "k", rates).remaining == 1


def test_ping_answers_true_when_every_server_answers(client: Client) -> None:
    """ping is True against a live server or Cluster."""
    assert RedisStore(client, timeout=STORE_TIMEOUT).ping() is True


def test_generic_script_entry_point_returns_the_raw_reply(client: Client) -> None:
    """_eval runs a named script on the keys' server with NOSCRIPT handling, for other scripts."""
    store = RedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    plan = build("gcra", "rw", "k", WORKED, 1)
    args = ["1700000000000000", 1, *plan.params[0]]
    first = store._eval("gcra", plan.keys, args)
    flush_scripts(client)
    second = store._eval("gcra", plan.keys, args)
    assert first[1] == second[1] == 1
    assert (first[3], second[3]) == (19, 18)


def test_a_script_error_is_a_storage_error_not_an_outage(client: Client) -> None:
    """A key of the wrong type makes the script fail: StorageError, not StorageUnavailableError."""
    store = RedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    key = build("gcra", "rw", "k", WORKED, 1).keys[0]
    client.hset(key, "not", "a timestamp")
    with pytest.raises(StorageError) as caught:
        store.hit("gcra", "k", WORKED)
    assert not isinstance(caught.value, StorageUnavailableError)
    assert isinstance(caught.value.__cause__, Exception)


def test_bad_settings_are_configuration_errors(redis_client: redis.Redis) -> None:
    """The timeout must be positive and finite, the prefix brace-free, the client blocking."""
    for timeout in (0, -1, math.inf, math.nan, None, True):
        with pytest.raises(ConfigurationError, match="timeout"):
            RedisStore(redis_client, timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="prefix"):
        RedisStore(redis_client, prefix="a{b}")
    with pytest.raises(ConfigurationError, match="AsyncRedisStore"):
        RedisStore(redis.asyncio.Redis())  # type: ignore[arg-type]


def test_the_store_leaves_a_given_client_open(redis_client: redis.Redis) -> None:
    """close releases the store's connections; the caller's client keeps working."""
    store = RedisStore(redis_client, timeout=STORE_TIMEOUT)
    store.hit("gcra", "k", WORKED)
    store.close()
    assert redis_client.ping()


def test_repr_names_the_server_and_settings(redis_client: redis.Redis) -> None:
    """The repr says where decisions go and with which prefix, timeout and clock."""
    text = repr(RedisStore(redis_client, prefix="api", timeout=0.05, clock=ManualClock()))
    assert text.startswith("RedisStore('127.0.0.1:")
    assert "prefix='api'" in text and "timeout=0.05" in text and "ManualClock" in text

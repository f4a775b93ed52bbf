"""RedisStore: decisions, layering, expiry and recovery, on a server and on a Cluster."""

from __future__ import annotations

import math
import time

import pytest
import redis

from ratewarden import Limiter, MemoryStore, Rate
from ratewarden.algorithms import ALGORITHMS
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
    # Real time passed between the calls, so the wait is under 0.6 s (how much under depends
    # on how busy the machine was).
    assert 0 < decisions[20].retry_after <= 0.6


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


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_on_redis_time_every_key_lives_no_longer_than_its_layer_says(
    client: Client, algorithm: str
) -> None:
    """On Redis TIME each written key's PTTL is above 0 and at most its layer's reset_after."""
    store = RedisStore(client, timeout=STORE_TIMEOUT)
    for _ in range(3):
        sent = time.monotonic()
        decision = store.hit(algorithm, "ttl-key", TTL_RATES)
        assert decision.allowed
    keys = build(algorithm, "rw", "ttl-key", TTL_RATES, 1).keys
    assert set(all_keys(client)) <= {k.encode() for k in keys}
    written = [client.pttl(key) for key in keys]
    since = time.monotonic() - sent
    for key, layer, pttl in zip(keys, decision.layers, written, strict=True):
        if pttl == -2:  # gone: only if its window ended before it was read
            assert layer.reset_after <= since, key
        else:
            assert 0 < pttl <= math.ceil(layer.reset_after * 1000), key


def test_on_redis_time_gcra_keys_live_no_longer_than_the_longest_period(client: Client) -> None:
    """GCRA state expires when the key is full again: within the longest period (ms)."""
    store = RedisStore(client, timeout=STORE_TIMEOUT)
    for _ in range(3):
        store.hit("gcra", "ttl-key", TTL_RATES)
    longest_ms = math.ceil(max(r.period_us for r in TTL_RATES) / 1000)
    keys = all_keys(client)
    assert len(keys) == len(TTL_RATES)
    for key in keys:
        assert 0 < client.pttl(key) <= longest_ms


#: The least time to live of a key written with an injected clock (storage/lua/_prelude.lua).
INJECTED_TTL_FLOOR_MS = 86_400_000


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_with_an_injected_clock_every_key_lives_at_least_a_day(
    client: Client, algorithm: str
) -> None:
    """Redis counts TTLs in real time, which may run ahead of a test clock: a day at least."""
    store = RedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    for _ in range(3):
        assert store.hit(algorithm, "ttl-key", TTL_RATES).allowed
    keys = build(algorithm, "rw", "ttl-key", TTL_RATES, 1).keys
    assert sorted(all_keys(client)) == sorted(k.encode() for k in keys)
    for key in keys:
        # A few milliseconds may pass between the write and the read.
        assert INJECTED_TTL_FLOOR_MS - 10_000 < client.pttl(key) <= INJECTED_TTL_FLOOR_MS


def test_on_redis_time_a_fixed_window_key_keeps_its_ttl_until_the_next_window(
    client: Client,
) -> None:
    """On Redis TIME a hit in the window the key already counts leaves its TTL alone (the
    window's end has not moved, so fixed_window.lua writes it with KEEPTTL); a hit that finds
    another window's count sets a new one."""
    store = RedisStore(client, timeout=STORE_TIMEOUT)
    hourly = Rate.parse("5/hour")
    assert store.hit("fixed_window", "kept", hourly).remaining == 4
    (key,) = all_keys(client)
    client.pexpire(key, 5_000_000)  # longer than any of the hour's windows lasts
    assert store.hit("fixed_window", "kept", hourly).remaining == 3
    assert 4_990_000 < client.pttl(key) <= 5_000_000
    window, count = client.get(key).split()
    client.set(key, f"{int(window) - 1} {int(count)}", px=5_000_000)  # the last window's count
    assert store.hit("fixed_window", "kept", hourly).remaining == 4
    assert 0 < client.pttl(key) <= 3_600_000


def test_on_redis_time_a_fixed_window_key_expires_when_its_window_ends(client: Client) -> None:
    """The window's first hit sets the key's expiry to the window's end, to the millisecond,
    however long the script took between reading TIME and writing the key (a TTL counted from
    the write outlived the window by 1 ms whenever a millisecond ticked over in between, and
    later hits keep it)."""
    store = RedisStore(client, timeout=STORE_TIMEOUT)
    periods_ms = [rate.period_us // 1000 for rate in TTL_RATES]
    for n in range(300):
        sent = time.monotonic()
        decision = store.hit("fixed_window", f"ends-{n}", TTL_RATES)
        assert decision.allowed
        keys = build("fixed_window", "rw", f"ends-{n}", TTL_RATES, 1).keys
        expiries = [client.pexpiretime(key) for key in keys]
        since = time.monotonic() - sent
        for key, period_ms, layer, expires_at in zip(
            keys, periods_ms, decision.layers, expiries, strict=True
        ):
            if expires_at == -2:  # gone: only if its window ended before it was read
                assert layer.reset_after <= since, key
            else:
                assert expires_at > 0
                assert expires_at % period_ms == 0, (key, expires_at)


def test_with_an_injected_clock_every_fixed_window_hit_sets_its_ttl_afresh(
    client: Client,
) -> None:
    """An injected clock may run slower than Redis's: each write's TTL is the day's floor again."""
    store = RedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    rate = Rate.parse("5/minute")
    assert store.hit("fixed_window", "afresh", rate).remaining == 4
    (key,) = all_keys(client)
    client.pexpire(key, 5_000_000)
    assert store.hit("fixed_window", "afresh", rate).remaining == 3
    assert INJECTED_TTL_FLOOR_MS - 10_000 < client.pttl(key) <= INJECTED_TTL_FLOOR_MS


BURSTY = ("gcra", "token_bucket", "leaky_bucket")


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_test_clock_slower_than_real_time_admits_what_memory_does(
    client: Client, algorithm: str
) -> None:
    """10,000/s offered at 20,000/s of a test clock: Redis agrees with memory call for call.

    Each call takes longer in real time than the 50 us the test clock advances, so
    a key whose TTL Redis counted in real time used to expire before the test clock
    said it could, and the next call saw a rested key (GCRA admitted 10,055-10,138
    of a second's 20,000 instead of 10,010).
    """
    # The windows' keys live a window: 100 per 10 ms is the same rate with short TTLs.
    rate = Rate.parse("10000/second", burst=10) if algorithm in BURSTY else Rate.parse("100/10ms")
    clock = ManualClock(1767225659.0)
    on_redis = Limiter(RedisStore(client, clock=clock, timeout=STORE_TIMEOUT), algorithm=algorithm)
    in_memory = Limiter(MemoryStore(clock=clock), algorithm=algorithm)
    redis_answers, memory_answers = [], []
    for _ in range(3_000):
        redis_answers.append(on_redis.hit("k", rate).allowed)
        memory_answers.append(in_memory.hit("k", rate).allowed)
        clock.advance(0.00005)
    assert redis_answers == memory_answers
    if algorithm == "gcra":
        # The burst of 10 at once, then one per 100 us until the last call at 149.95 ms.
        assert sum(redis_answers) == 10 + 1_499


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
    """A script call (``_script_call``, run by ``_run``) runs a named script on the keys'
    server with NOSCRIPT handling, for other scripts than the rate algorithms'."""
    store = RedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    plan = build("gcra", "rw", "k", WORKED, 1)
    args = ["1700000000000000", 1, *plan.params[0]]
    first = store._run(store._script_call("gcra", plan.keys, args, list))
    flush_scripts(client)
    second = store._run(store._script_call("gcra", plan.keys, args, list))
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

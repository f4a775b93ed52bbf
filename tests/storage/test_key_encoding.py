"""Keys that are not valid text: every store rejects the same ones, the same way, sending nothing.

A Python ``str`` may hold a lone surrogate (``"\\ud800"``, or ``"\\udc80"`` left by
``bytes.decode(errors="surrogateescape")``). It cannot be encoded as UTF-8, so
Redis can never be sent it; the memory store could hold it, but then the two
stores would disagree about which keys exist. Both raise ``ConfigurationError``
naming the key and the reason, before any state is read or any command is sent,
and valid non-ASCII keys (accents, CJK, emoji) keep working on every store.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratewarden import Limiter, Rate
from ratewarden.budgets import TokenBudget
from ratewarden.errors import ConfigurationError
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, STORE_TIMEOUT
from tests.storage.conftest import AsyncClient, Client, all_keys

RATE = Rate.parse("10/minute")

#: Keys no store can hold: a lone high or low surrogate, alone or inside text, and an
#: astral character written as two surrogate code units (Python does not pair them).
NOT_TEXT = [
    "\ud800",
    "\udfff",
    "user:\udc80",  # what surrogateescape leaves for the byte 0x80
    "tenant-\ud83d\ude00-x",
    "é\ud800日本",
]
#: Valid non-ASCII keys: each must be decided, on its own counter.
TEXT = ["é", "日本", "😀", "ключ", "a\u0000b", "\uffff"]


def rejects(key: str, excinfo: pytest.ExceptionInfo[ConfigurationError]) -> None:
    """The error names the key (its repr) and why it was refused."""
    message = str(excinfo.value)
    assert repr(key) in message
    assert "surrogates not allowed" in message
    assert excinfo.value.__cause__ is None  # ours, not a UnicodeEncodeError in disguise


def ports(client: Any) -> list[int]:
    """The ports of every server behind a (sync or asyncio) client."""
    if isinstance(client, redis.RedisCluster | aredis.RedisCluster):
        return [node.port for node in client.get_nodes()]
    return [int(client.connection_pool.connection_kwargs["port"])]


#: What a probe connection itself runs: its handshake and the INFO that reads the counts.
PROBE = {"cmdstat_info", "cmdstat_hello", "cmdstat_client|setinfo"}


def commands_served(client: Any) -> int:
    """Commands the servers behind ``client`` have run, the probe's own left out."""
    total = 0
    for port in ports(client):
        with redis.Redis(host=HOST, port=port) as probe:
            stats = probe.info("commandstats")
        total += sum(v["calls"] for name, v in stats.items() if name not in PROBE)
    return total


@pytest.mark.parametrize("key", NOT_TEXT, ids=ascii)
def test_the_memory_store_rejects_a_key_that_is_not_text_and_keeps_nothing(key: str) -> None:
    """MemoryStore: ConfigurationError naming the key; no state is created for it."""
    store = MemoryStore(clock=ManualClock())
    with pytest.raises(ConfigurationError) as caught:
        store.hit("gcra", key, RATE)
    rejects(key, caught)
    assert len(store) == 0


@pytest.mark.parametrize("key", NOT_TEXT, ids=ascii)
async def test_the_async_memory_store_rejects_a_key_that_is_not_text(key: str) -> None:
    """AsyncMemoryStore: the same error as its sync twin, and no state."""
    store = AsyncMemoryStore(clock=ManualClock())
    with pytest.raises(ConfigurationError) as caught:
        await store.hit("gcra", key, [RATE, Rate.parse("100/hour")])
    rejects(key, caught)
    assert len(store) == 0


@pytest.mark.redis
@pytest.mark.parametrize("key", NOT_TEXT, ids=ascii)
def test_the_redis_store_rejects_a_key_that_is_not_text_before_sending(
    client: Client, key: str
) -> None:
    """RedisStore (standalone and Cluster): ConfigurationError, and not one command sent."""
    store = RedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    store.hit("gcra", "warm", RATE)  # the connection and script are ready: a send would count
    before = commands_served(client)
    with pytest.raises(ConfigurationError) as caught:
        store.hit("gcra", key, RATE)
    rejects(key, caught)
    assert commands_served(client) == before
    assert len(all_keys(client)) == 1
    assert store.hit("gcra", "warm", RATE).remaining == 8, "the store still decides"


@pytest.mark.redis
@pytest.mark.parametrize("key", NOT_TEXT, ids=ascii)
async def test_the_async_redis_store_rejects_a_key_that_is_not_text_before_sending(
    async_client: AsyncClient, key: str
) -> None:
    """AsyncRedisStore (standalone and Cluster): the same error, nothing sent, still decides."""
    store = AsyncRedisStore(async_client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    await store.hit("gcra", "warm", RATE)
    before = commands_served(async_client)
    with pytest.raises(ConfigurationError) as caught:
        await store.hit("gcra", key, [RATE, Rate.parse("100/hour")])
    rejects(key, caught)
    assert commands_served(async_client) == before
    assert (await store.hit("gcra", "warm", RATE)).remaining == 8
    await store.aclose()


@pytest.mark.redis
def test_reset_and_leases_reject_the_same_keys(redis_client: redis.Redis) -> None:
    """The other keyed operations go through the same check on both stores."""
    key = "user:\udc80"
    for store in (
        MemoryStore(clock=ManualClock()),
        RedisStore(redis_client, clock=ManualClock(), timeout=STORE_TIMEOUT),
    ):
        with pytest.raises(ConfigurationError) as caught:
            store.reset("gcra", key, RATE)
        rejects(key, caught)
        with pytest.raises(ConfigurationError) as caught:
            store.acquire_slot(key, 2, "lease-1", 1, 1_000_000)
        rejects(key, caught)
    assert redis_client.keys() == []


@pytest.mark.redis
def test_token_budgets_reject_the_same_keys(redis_client: redis.Redis) -> None:
    """A token budget's keys (built in storage/_ops.py) go through the same check: the
    memory store used to accept the key and Redis to raise UnicodeEncodeError."""
    key = "tenant-\ud83d\ude00-x"
    for store in (
        MemoryStore(clock=ManualClock()),
        RedisStore(redis_client, clock=ManualClock(), timeout=STORE_TIMEOUT),
    ):
        budget = TokenBudget(store, {"tokens": "100000/minute"}, max_output_tokens=100)
        with pytest.raises(ConfigurationError) as caught:
            budget.reserve(key, 10)
        rejects(key, caught)
        assert budget.reserve("tenant-é", 10).decision.allowed
    stored = all_keys(redis_client)
    assert stored and all("tenant-é".encode() in k for k in stored)


@pytest.mark.redis
def test_the_limiter_passes_the_error_on(redis_client: redis.Redis) -> None:
    """``Limiter.hit`` with such a key raises the store's ConfigurationError: no silent allow."""
    limiter = Limiter(RedisStore(redis_client, clock=ManualClock(), timeout=STORE_TIMEOUT))
    with pytest.raises(ConfigurationError) as caught:
        limiter.hit("\ud800", RATE)
    rejects("\ud800", caught)


@pytest.mark.redis
def test_valid_non_ascii_keys_are_decided_on_their_own_counters(client: Client) -> None:
    """Accents, CJK, emoji, NUL and U+FFFF are text: decided, one counter each, on both stores."""
    clock = ManualClock()
    stores = (MemoryStore(clock=clock), RedisStore(client, clock=clock, timeout=STORE_TIMEOUT))
    for store in stores:
        for key in TEXT:
            assert store.hit("gcra", key, RATE).remaining == 9
        assert [store.hit("gcra", key, RATE).remaining for key in TEXT] == [8] * len(TEXT)
    assert len(all_keys(client)) == len(TEXT)


@pytest.mark.redis
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=st.text(st.characters(codec=None, exclude_categories=()), min_size=1, max_size=12))
def test_both_stores_reject_exactly_the_keys_utf8_cannot_encode(
    redis_client: redis.Redis, key: str
) -> None:
    """Over any text, surrogates included: memory and Redis reject the same keys (those
    UTF-8 cannot encode) and decide the others identically."""
    clock = ManualClock()
    memory, shared = (
        MemoryStore(clock=clock),
        RedisStore(redis_client, clock=clock, timeout=STORE_TIMEOUT),
    )
    try:
        key.encode()
        encodable = True
    except UnicodeEncodeError:
        encodable = False
    outcomes = []
    for store in (memory, shared):
        try:
            outcomes.append(store.hit("gcra", key, RATE))
        except ConfigurationError as exc:
            outcomes.append(exc)
    if encodable:
        assert outcomes[0] == outcomes[1]
        shared.reset("gcra", key, RATE)
    else:
        assert all(isinstance(o, ConfigurationError) for o in outcomes)
        assert str(outcomes[0]) == str(outcomes[1])

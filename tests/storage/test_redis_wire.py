"""The Redis stores' own wire path: request templates, derived commands, and the lean link.

The templates pack a decision's EVALSHA without hiredis; these tests hold them
to hiredis's own packing, byte for byte. The link drives a non-blocking socket
itself; these tests push requests and replies through it that take many
system calls each way, on a real redis-server.
"""

from __future__ import annotations

from collections.abc import Callable

import hiredis
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Rate
from ratewarden.algorithms import ALGORITHMS
from ratewarden.errors import ConfigurationError
from ratewarden.storage import _decisions, _plan
from ratewarden.storage._keys import _ESCAPES, escape
from ratewarden.storage._redis_link import SPIN_BACKOFF, LinkPool
from ratewarden.storage._redis_protocol import (
    BatchTemplate,
    Template,
    as_eval,
    eval_command,
    evalsha_command,
    unpack,
)
from ratewarden.storage._scripts import script
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisCluster, RedisServer

pytestmark = pytest.mark.redis

rates = st.lists(
    st.builds(
        Rate,
        limit=st.integers(1, 10_000),
        period=st.integers(1, 86_400),
        burst=st.none() | st.integers(1, 1_000),
    ),
    min_size=1,
    max_size=4,
    unique=True,
)
# Any key a caller may pass, braces, percent signs and non-ASCII included.
keys = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)
nows = st.none() | st.integers(0, 2**53)


@given(key=keys)
def test_escape_is_the_translation_for_every_key(key: str) -> None:
    """The shortcut for keys with nothing to escape never changes what escape() returns."""
    assert escape(key) == key.translate(_ESCAPES)


def _template(algorithm: str, prefix: str, found: list[Rate], cost: int) -> Template:
    shape = _plan.shape(algorithm, found, cost)
    args = [cost, *(value for layer in shape.params for value in layer)]
    return Template(script(algorithm), prefix, shape.suffixes, args)


@settings(max_examples=300, deadline=None)
@given(
    algorithm=st.sampled_from(["gcra", "token_bucket", "leaky_bucket"]),
    prefix=st.sampled_from(["rw", "app:limits", "é"]),
    found=rates,
    key=keys,
    cost=st.integers(0, 10**6),
    now_us=nows,
)
def test_a_template_packs_what_hiredis_packs(
    algorithm: str, prefix: str, found: list[Rate], key: str, cost: int, now_us: int | None
) -> None:
    """For any call, the template's request is hiredis's packing of the planned EVALSHA."""
    plan = _plan.build(algorithm, prefix, key, found, cost)
    expected = evalsha_command(script(algorithm), plan.keys, _plan.argv(plan, now_us))
    packed = _template(algorithm, prefix, found, cost).pack(escape(key), now_us)
    assert packed == expected


@settings(max_examples=200, deadline=None)
@given(
    algorithm=st.sampled_from(sorted(ALGORITHMS)),
    prefix=st.sampled_from(["rw", "app:limits", "é"]),
    calls=st.lists(
        st.tuples(keys, rates, st.integers(0, 10**6)),
        min_size=1,
        max_size=4,
        unique_by=lambda c: c[0],
    ),
    now_us=nows,
)
def test_a_batch_template_packs_what_hiredis_packs(
    algorithm: str, prefix: str, calls: list[tuple[str, list[Rate], int]], now_us: int | None
) -> None:
    """For any hit_all, the batch template's request is hiredis's packing of the planned
    EVALSHA: every call's keys in order, then now and every call's arguments."""
    shapes = _plan.Shapes()
    try:
        found = _plan.batch(shapes, algorithm, [(key, tuple(r), cost) for key, r, cost in calls])
    except ConfigurationError:  # rates an algorithm refuses (a burst on a window)
        return
    keys_sent = [state for key, shape in found for state in shape.keys(prefix, key)]
    args = _plan.batch_argv(found, now_us)
    expected = evalsha_command(script(algorithm), keys_sent, args)
    template = BatchTemplate(
        script(algorithm),
        prefix,
        [shape.suffixes for _, shape in found],
        _plan.batch_argv(found, None)[1:],
    )
    assert template.pack([escape(key) for key, _ in found], now_us) == expected


@settings(max_examples=100, deadline=None)
@given(found=rates, key=keys, now_us=nows)
def test_eval_and_parts_are_derived_from_the_packed_evalsha(
    found: list[Rate], key: str, now_us: int | None
) -> None:
    """NOSCRIPT's EVAL and a redirection's parts come from the EVALSHA bytes, unchanged."""
    plan = _plan.build("gcra", "rw", key, found, 1)
    args = _plan.argv(plan, now_us)
    packed = evalsha_command(script("gcra"), plan.keys, args)
    assert as_eval(script("gcra"), packed) == eval_command(script("gcra"), plan.keys, args)
    parts = unpack(packed)
    assert parts[:3] == [b"EVALSHA", script("gcra").sha.encode(), str(len(plan.keys)).encode()]
    assert parts[3 : 3 + len(plan.keys)] == [k.encode() for k in plan.keys]
    assert parts[3 + len(plan.keys) :] == [str(a).encode() for a in args]


def test_every_algorithm_has_a_template_that_runs(redis_client: redis.Redis) -> None:
    """Each algorithm's templated request runs its script and answers per layer."""
    pool = LinkPool.for_pool(redis_client.connection_pool, 1.0)
    link = pool.take()
    try:
        for name in sorted(ALGORITHMS):
            found = [Rate(10, 1), Rate(100, 60)]
            # EVAL: the script need not be cached on this server yet.
            request = as_eval(script(name), _template(name, "rw", found, 1).pack("user:1", None))
            reply = link.request(request)
            assert isinstance(reply, list), (name, reply)
            assert len(reply) == 2 + _decisions.REPLY_WIDTH * len(found)
    finally:
        pool.give(link)
        pool.close()


@pytest.mark.parametrize("size", [1, 300_000, 4_000_000])
def test_a_link_carries_requests_and_replies_larger_than_a_socket_buffer(
    redis_server: RedisServer, size: int
) -> None:
    """A request the socket cannot take at once, and a reply read in many pieces, arrive whole."""
    client = redis_server.client()
    pool = LinkPool.for_pool(client.connection_pool, 1.0)
    link = pool.take()
    value = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    try:
        assert link.request(hiredis.pack_command(("SET", "rw-wire", value))) == b"OK"
        assert link.request(hiredis.pack_command(("GET", "rw-wire"))) == value
        assert link.request(hiredis.pack_command(("PING",))) == b"PONG"
    finally:
        pool.give(link)
        pool.close()
        client.delete("rw-wire")
        client.close()


def test_a_link_reports_error_replies_as_values(redis_client: redis.Redis) -> None:
    """An error reply comes back as a value, and the link stays usable."""
    pool = LinkPool.for_pool(redis_client.connection_pool, 1.0)
    link = pool.take()
    try:
        reply = link.request(hiredis.pack_command(("NOSUCHCOMMAND",)))
        assert isinstance(reply, hiredis.ReplyError)
        assert link.request(hiredis.pack_command(("PING",))) == b"PONG"
    finally:
        pool.give(link)
        pool.close()


# Keys whose raw text hashes to another slot than their escaped hash tag.
AWKWARD_KEYS = ["a{b}c:%", "{x}", "}{", "%7B", "user{1}", "é{"]


def _moved_replies(client: redis.RedisCluster) -> int:
    stats = [client.info("errorstats", target_nodes=n) for n in client.get_primaries()]
    return sum(int(s.get("errorstat_MOVED", {}).get("count", 0)) for s in stats)


@pytest.mark.cluster
def test_decisions_go_straight_to_their_slot_even_for_keys_with_braces(
    cluster_client: redis.RedisCluster,
) -> None:
    """Every decision lands on its slot's primary first time: no MOVED reply on any node."""
    cluster_client.config_resetstat(target_nodes=redis.RedisCluster.PRIMARIES)
    # A generous timeout: this is about routing, on a machine that may be busy.
    store = RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
    for key in AWKWARD_KEYS:
        assert store.hit("gcra", key, [Rate(5, 1), Rate(50, 60)]).remaining == 4
        assert store.acquire_slot(key, 2, "lease", 1, 1_000_000).allowed
    assert _moved_replies(cluster_client) == 0


@pytest.mark.cluster
async def test_async_decisions_go_straight_to_their_slot(redis_cluster: RedisCluster) -> None:
    """The asyncio store routes the same way: no MOVED reply on any node."""
    admin = redis_cluster.client()
    admin.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    admin.config_resetstat(target_nodes=redis.RedisCluster.PRIMARIES)
    url = f"redis+cluster://127.0.0.1:{redis_cluster.nodes[0].port}"
    store = AsyncRedisStore.from_url(url, timeout=1.0)
    try:
        for key in AWKWARD_KEYS:
            assert (await store.hit("gcra", key, Rate(5, 1))).remaining == 4
    finally:
        await store.aclose()
    assert _moved_replies(admin) == 0
    admin.close()


@pytest.mark.parametrize("attempt", range(3))
def test_a_connection_the_server_closed_right_after_a_hit_is_replaced_before_the_next(
    make_redis: Callable[..., RedisServer], attempt: int
) -> None:
    """CLIENT KILL moments after a hit: the next hit notices the closed link, reconnects, decides.

    The check before every send is what makes this hold however soon the next hit comes.
    """
    server = make_redis()
    client = server.client()
    store = RedisStore(client, clock=ManualClock(), timeout=1.0)
    key = f"killed-{attempt}"
    with server.client() as admin:
        assert store.hit("gcra", key, Rate(10, 60)).remaining == 9
        assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
        assert store.hit("gcra", key, Rate(10, 60)).remaining == 8
    store.close()
    client.close()


# A script that keeps the server busy for ``ARGV[1]`` microseconds before it answers.
_SLOW = """
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat
  t = redis.call('TIME')
until t[1] * 1000000 + t[2] - start >= tonumber(ARGV[1])
return 1
"""


def test_a_reply_slower_than_the_spin_stops_the_spinning_for_a_while(
    redis_client: redis.Redis,
) -> None:
    """A link spins for fast replies; after a slow one it sleeps at once for SPIN_BACKOFF
    requests, then spins again. Every reply arrives whole either way. The spin (100 ms) is far
    above a PING's round trip on a busy machine, and the slow reply (250 ms) far above it."""
    pool = LinkPool.for_pool(redis_client.connection_pool, 1.0, spin=0.1)
    link = pool.take()
    slow = hiredis.pack_command(("EVAL", _SLOW, "0", "250000"))  # 250 ms: past the spin
    ping = hiredis.pack_command(("PING",))
    try:
        assert link.request(ping) == b"PONG"
        assert link._skip == 0
        assert link.request(slow) == 1
        assert link._skip == SPIN_BACKOFF
        for left in range(SPIN_BACKOFF - 1, -1, -1):
            assert link.request(ping) == b"PONG"
            assert link._skip == left
        assert link.request(slow) == 1  # spinning again: and missing again
        assert link._skip == SPIN_BACKOFF
    finally:
        pool.give(link)
        pool.close()


def test_a_link_that_never_spins_sleeps_for_every_reply(redis_client: redis.Redis) -> None:
    pool = LinkPool.for_pool(redis_client.connection_pool, 1.0, spin=0)
    link = pool.take()
    try:
        assert link.request(hiredis.pack_command(("EVAL", _SLOW, "0", "2000"))) == 1
        assert link.request(hiredis.pack_command(("PING",))) == b"PONG"
        assert link._skip == 0
    finally:
        pool.give(link)
        pool.close()


@pytest.mark.parametrize("spin", [-0.001, 0.02, 1.0, float("nan"), True, "0.0001"])
def test_a_spin_outside_zero_to_the_timeout_is_refused(
    redis_client: redis.Redis, spin: object
) -> None:
    with pytest.raises(ConfigurationError, match="spin"):
        RedisStore(redis_client, timeout=0.02, spin=spin)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="spin"):
        RedisStore.from_url("redis://127.0.0.1:1/0", timeout=0.02, spin=spin)  # type: ignore[arg-type]


def test_a_store_without_spin_decides_the_same(redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, clock=ManualClock(), timeout=1.0, spin=0)
    rate = Rate.parse("2/minute")
    assert [store.hit("gcra", "k", rate).allowed for _ in range(3)] == [True, True, False]

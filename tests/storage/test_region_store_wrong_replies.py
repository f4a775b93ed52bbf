"""A server that speaks Redis's protocol but answers the wrong shape fails a region store.

The region stores (``RegionStore``, ``AsyncRegionStore``) run the budget's script and the
exchange on a redis-py client. A Redis-protocol proxy, another RESP service or a wrong port
answering each command with one RESP value made their reading of the replies leak
``TypeError``, ``ValueError``, ``IndexError`` and ``AttributeError`` (redis-py's handshake
and reply callbacks too) to ``ReconciledBudget``, ``RegionalQuota`` and ``DemandExchange``,
past their handling of a store's failure; a string was even read as its bytes (a script's
reply ``OK`` as the numbers ``[79, 75]``, an HGETALL's string as an empty hash). Now every
call raises ``StorageError`` (not an outage: waiting will not help) that says what the
server answered, as ``RedisStore`` does (test_redis_wrong_reply_shape.py), and answers a
reply of the right shape as it reads Redis's.

``WrongShapeServer`` (tests/_wrong_shape.py) answers every command with one value, and
redis-py's ``HELLO`` either with that value too (its handshake fails), refused (RESP2, as
before Redis 6) or as Redis 6+ answers it (RESP3), so the store's own readings are reached
under both protocols' reply callbacks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.regions import AsyncDemandExchange, DemandExchange
from ratewarden.storage._region_plan import PeerRound
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
from tests._servers import HOST
from tests._wrong_shape import HELLO_MAP, HELLO_REFUSED, REPLIES, WrongShapeServer

MEMBER = "10:60000000:k"
#: How the server answers redis-py's handshake: ``None`` as every command.
HANDSHAKES: dict[str, bytes | None] = {
    "HELLO answered so too": None,
    "RESP2": HELLO_REFUSED,
    "RESP3": HELLO_MAP,
}
#: A reply of one of REPLIES that is the right shape for the call (so Redis could answer
#: it): what the call returns, under both protocols, or RESP2's alone (redis-py reads a nil
#: HGETALL as an empty hash there).
RIGHT_SHAPE: dict[tuple[str, str], Any] = {
    ("publish_demand", "integer"): None,  # HINCRBY, HDEL: numbers; EXPIRE's 1: True
    ("publish_taken", "integer"): None,
    ("finish_round", "status"): None,  # SET's OK
    ("demand", "nil"): None,  # no count published
    ("active", "8 strings"): ["x"] * 8,
}
RIGHT_SHAPE_RESP2: dict[tuple[str, str], Any] = {
    ("read_counts", "nil"): [[]],
    ("read_round", "nil"): PeerRound(None, [[]], [(-1, -1)], None),
}


def _calls(store: Any) -> dict[str, Callable[[], Any]]:
    """Every call of a region store that reads a reply from its client (blocking, or a
    coroutine to await); ``hit``'s and ``ping``'s are ``RedisStore``'s, tested there."""
    return {
        "apply": lambda: store.apply(store.budget_hit(MEMBER, "eu", 1, 5)),
        "apply merge": lambda: store.apply(
            store.budget_merge(MEMBER, "eu", (1, 2), True, [(0, "us", 3)])
        ),
        "publish_active": lambda: store.publish_active("eu", {MEMBER: 10**15}, 0, ["eu"]),
        "active": lambda: store.active("eu", 0, 10),
        "read_counts": lambda: store.read_counts([MEMBER]),
        "finish_round": lambda: store.finish_round("eu", 1),
        "read_round": lambda: store.read_round("eu", [MEMBER]),
        "publish_demand": lambda: store.publish_demand("eu", 3, 4),
        "demand": lambda: store.demand("eu", 3),
        "publish_taken": lambda: store.publish_taken("eu", 3, "x"),
        "demand_and_taken": lambda: store.demand_and_taken("eu", 3, 2),
    }


CALLS = list(_calls(None))


def _expected(call: str, reply: str, handshake: str) -> Any:
    """What ``call`` returns for ``reply``, or StorageError when it is of the wrong shape."""
    if handshake == "HELLO answered so too":
        return StorageError
    if handshake == "RESP2" and (call, reply) in RIGHT_SHAPE_RESP2:
        return RIGHT_SHAPE_RESP2[call, reply]
    return RIGHT_SHAPE.get((call, reply), StorageError)


@pytest.fixture(autouse=True)
def _quiet_resp2_fallback() -> Iterator[None]:
    """redis-py warns at each connection that falls back to RESP2: not what is tested."""
    logger = logging.getLogger("redis.connection")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.fixture(params=list(HANDSHAKES))
def handshake(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(params=list(REPLIES))
def reply(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def server(handshake: str, reply: str) -> Iterator[WrongShapeServer]:
    found = WrongShapeServer(REPLIES[reply], HANDSHAKES[handshake])
    yield found
    found.close()


def _refused(error: BaseException, server: WrongShapeServer, call: str) -> None:
    """The store's error for the server, not an outage, saying what it answered to what."""
    assert isinstance(error, StorageError)
    assert not isinstance(error, StorageUnavailableError)
    message = str(error)
    what = "a ratewarden script" if call.startswith("apply") else "ratewarden's "
    assert f"{HOST}:{server.port} answered {what}" in message
    assert "waiting will not help" in message


@pytest.mark.parametrize("call", CALLS)
def test_every_call_raises_the_stores_error_or_reads_a_right_shape(
    server: WrongShapeServer, handshake: str, reply: str, call: str
) -> None:
    """Each call raises StorageError for a reply of the wrong shape, never TypeError,
    ValueError, IndexError or AttributeError, and never reads a string as its bytes; a
    reply Redis could send is read as Redis's is."""
    store = RegionStore.from_url(server.url, timeout=1.0)
    expected = _expected(call, reply, handshake)
    try:
        if expected is StorageError:
            with pytest.raises(StorageError) as caught:
                _calls(store)[call]()
            _refused(caught.value, server, call)
        else:
            assert _calls(store)[call]() == expected
    finally:
        store.close()


async def test_every_async_call_raises_the_stores_error_or_reads_a_right_shape(
    server: WrongShapeServer, handshake: str, reply: str
) -> None:
    """The asyncio store's twin of the blocking calls."""
    store = AsyncRegionStore.from_url(server.url, timeout=1.0)
    try:
        for call, make in _calls(store).items():
            expected = _expected(call, reply, handshake)
            if expected is StorageError:
                with pytest.raises(StorageError) as caught:
                    await make()
                _refused(caught.value, server, call)
            else:
                assert await make() == expected, call
    finally:
        await store.aclose()


def test_apply_all_answers_each_op_with_the_stores_error(
    server: WrongShapeServer, handshake: str
) -> None:
    """apply_all answers a wrong reply in its op's place, as it answers an error reply; a
    handshake redis-py cannot read fails the round trip, all of it."""
    store = RegionStore.from_url(server.url, timeout=1.0)
    ops = [store.budget_hit(MEMBER, "eu", 1, 5), store.budget_hit(MEMBER, "us", 1, 5)]
    try:
        if handshake == "HELLO answered so too":
            with pytest.raises(StorageError) as caught:
                store.apply_all(ops)
            answers: list[Any] = [caught.value]
        else:
            answers = store.apply_all(ops)
            assert len(answers) == 2
    finally:
        store.close()
    for answer in answers:
        assert isinstance(answer, BaseException)
        _refused(answer, server, "apply_all")


async def test_async_apply_all_answers_each_op_with_the_stores_error(
    server: WrongShapeServer, handshake: str
) -> None:
    """The asyncio twin of apply_all."""
    store = AsyncRegionStore.from_url(server.url, timeout=1.0)
    ops = [store.budget_hit(MEMBER, "eu", 1, 5), store.budget_hit(MEMBER, "us", 1, 5)]
    try:
        if handshake == "HELLO answered so too":
            with pytest.raises(StorageError) as caught:
                await store.apply_all(ops)
            answers: list[Any] = [caught.value]
        else:
            answers = await store.apply_all(ops)
            assert len(answers) == 2
    finally:
        await store.aclose()
    for answer in answers:
        assert isinstance(answer, BaseException)
        _refused(answer, server, "apply_all")


def test_a_demand_exchange_counts_such_regions_as_unread(server: WrongShapeServer) -> None:
    """DemandExchange's handling of a store's failure applies: each region it cannot read
    is missing, with no demand, where a TypeError or ValueError stopped the collection (or
    an integer was read as a count)."""
    stores = {name: RegionStore.from_url(server.url, timeout=1.0) for name in ("eu", "us")}
    try:
        assert DemandExchange("eu", stores).collect(3) == ({"eu": 0, "us": 0}, ("eu", "us"))
    finally:
        for store in stores.values():
            store.close()


async def test_an_async_demand_exchange_counts_such_regions_as_unread(
    server: WrongShapeServer,
) -> None:
    """The asyncio twin: AsyncDemandExchange's handling of a store's failure applies."""
    stores = {name: AsyncRegionStore.from_url(server.url, timeout=1.0) for name in ("eu", "us")}
    try:
        found = await AsyncDemandExchange("eu", stores).collect(3)
    finally:
        for store in stores.values():
            await store.aclose()
    assert found == ({"eu": 0, "us": 0}, ("eu", "us"))

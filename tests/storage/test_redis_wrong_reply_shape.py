"""A server that speaks Redis's protocol but answers with the wrong shape is the store's failure.

A Redis-protocol proxy, a "Redis-compatible" server without Lua, or a wrong port on another
RESP service answers every command with a valid RESP value that is not what ratewarden's
scripts send. Each reading of such a reply used to leak ``TypeError`` or ``IndexError`` (an
8-byte string even read as a decision: its bytes indexed as numbers), whatever the failure
mode, and ``ping`` raised them too. Now every store call raises ``StorageError`` (not an
outage: waiting will not help) that says what the server answered, the failure mode answers
a limiter's hit, and ``ping`` raises it, so ``ratewarden serve`` refuses the store at start.

``WrongShapeServer`` (tests/_wrong_shape.py) is a real TCP server on loopback that answers
each command it reads (parsed with hiredis) with one fixed RESP value.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ratewarden import AsyncLimiter, Limiter, Rate
from ratewarden.decision import Decision
from ratewarden.errors import StorageError, StorageUnavailableError
from ratewarden.storage import Op, _decisions, _kernel, _plan
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import HOST
from tests._wrong_shape import REPLIES, WrongShapeServer

RATE = Rate.parse("10/minute")
RATES = [Rate.parse("10/minute"), Rate.parse("100/hour")]


@pytest.fixture(params=list(REPLIES))
def wrong_server(request: pytest.FixtureRequest) -> Iterator[WrongShapeServer]:
    server = WrongShapeServer(REPLIES[request.param])
    yield server
    server.close()


def _url(server: WrongShapeServer) -> str:
    return f"redis://{HOST}:{server.port}/0"


def _op() -> Op:
    return Op("fair_share", ("{k}:pool",), ("", 1), lambda *_: ([], ()))  # type: ignore[arg-type]


def _refused(error: BaseException, server: WrongShapeServer) -> None:
    """The store's error for the server, not an outage, saying what it answered."""
    assert isinstance(error, StorageError)
    assert not isinstance(error, StorageUnavailableError)
    message = str(error)
    assert f"{HOST}:{server.port} answered a ratewarden script with" in message
    assert "waiting will not help" in message


def _sync_calls(store: RedisStore) -> dict[str, Callable[[], Any]]:
    return {
        "hit": lambda: store.hit("fixed_window", "k", RATE),
        "peek": lambda: store.hit("gcra", "k", RATE, 0),
        "layered hit": lambda: store.hit("sliding_window", "k", RATES),
        "hit_all": lambda: store.hit_all("gcra", [("a", RATE, 1), ("b", RATE, 1)]),
        "layered hit_all": lambda: store.hit_all("gcra", [("a", RATES, 1)]),
        "acquire_slot": lambda: store.acquire_slot("k", 3, "lease", 1, 1_000_000),
        "release_slot": lambda: store.release_slot("k", "lease"),
        "renew_slot": lambda: store.renew_slot("k", "lease", 1_000_000),
        "apply": lambda: store.apply(_op()),
        "ping": store.ping,
    }


SYNC_CALLS = [
    "hit",
    "peek",
    "layered hit",
    "hit_all",
    "layered hit_all",
    "acquire_slot",
    "release_slot",
    "renew_slot",
    "apply",
    "ping",
]


@pytest.mark.parametrize("call", SYNC_CALLS)
def test_every_sync_call_raises_the_stores_error(wrong_server: WrongShapeServer, call: str) -> None:
    """Each call that reads a script's reply raises StorageError, never TypeError/IndexError,
    and never a decision read out of a string's bytes."""
    store = RedisStore.from_url(_url(wrong_server), timeout=1.0)
    try:
        with pytest.raises(StorageError) as caught:
            _sync_calls(store)[call]()
        _refused(caught.value, wrong_server)
    finally:
        store.close()


def test_apply_all_answers_each_op_with_the_stores_error(wrong_server: WrongShapeServer) -> None:
    """apply_all answers a wrong reply in its op's place, as it answers an error reply."""
    store = RedisStore.from_url(_url(wrong_server), timeout=1.0)
    try:
        answers = store.apply_all([_op(), _op()])
    finally:
        store.close()
    assert len(answers) == 2
    for answer in answers:
        assert isinstance(answer, BaseException)
        _refused(answer, wrong_server)


async def test_every_async_call_raises_the_stores_error(wrong_server: WrongShapeServer) -> None:
    """The asyncio store's twin of the sync calls."""
    store = AsyncRedisStore.from_url(_url(wrong_server), timeout=1.0)
    calls: dict[str, Callable[[], Any]] = {
        "hit": lambda: store.hit("fixed_window", "k", RATE),
        "layered hit": lambda: store.hit("sliding_window", "k", RATES),
        "hit_all": lambda: store.hit_all("gcra", [("a", RATE, 1), ("b", RATE, 1)]),
        "acquire_slot": lambda: store.acquire_slot("k", 3, "lease", 1, 1_000_000),
        "release_slot": lambda: store.release_slot("k", "lease"),
        "apply": lambda: store.apply(_op()),
        "ping": store.ping,
    }
    try:
        for name, call in calls.items():
            with pytest.raises(StorageError) as caught:
                await call()
            _refused(caught.value, wrong_server)
            assert name  # the loop names the call in a failure's traceback
    finally:
        await store.aclose()


def test_the_failure_mode_answers_a_limiters_hit(wrong_server: WrongShapeServer) -> None:
    """open allows and closed denies, each marked degraded: no exception reaches the caller
    (behind a middleware it was a 500 on every request)."""
    store = RedisStore.from_url(_url(wrong_server), timeout=1.0)
    try:
        opened = Limiter(store, failure_mode="open").hit("k", RATE)
        closed = Limiter(store, failure_mode="closed").hit("k", RATE)
    finally:
        store.close()
    assert (opened.allowed, opened.degraded) == (True, "open")
    assert (closed.allowed, closed.degraded) == (False, "closed")


async def test_the_failure_mode_answers_an_async_limiters_hit(
    wrong_server: WrongShapeServer,
) -> None:
    """The asyncio twin: the failure mode answers."""
    store = AsyncRedisStore.from_url(_url(wrong_server), timeout=1.0)
    try:
        found = await asyncio.gather(
            AsyncLimiter(store, failure_mode="open").hit("k", RATE),
            AsyncLimiter(store, failure_mode="closed").hit("k", RATE),
        )
    finally:
        await store.aclose()
    assert [(d.allowed, d.degraded) for d in found] == [(True, "open"), (False, "closed")]


# -- the decoders alone (pure logic): C when built, and the Python reference ---------------


def _found(count: int, rates: Any = RATE) -> _plan.Batch:
    return _plan.batch(_plan.Shapes(), "gcra", [(f"k{i}", rates, 1) for i in range(count)])


BAD_BATCH_REPLIES = [
    1,
    b"OK",
    b"abcdefghijklmn",  # 14 bytes: the length of a 2-call reply
    None,
    [1, b"abc"],
    [0, 1] + [1, 9, 0, 0, 0, 0] * 3,  # a call too many
    [0, 1] + [b"x"] * 12,
    [0, 1] + [1, 9, 0, None, 0, 0] * 2,
]


def _batch_decoders() -> list[Callable[[Any, Any], list[Decision]]]:
    found: list[Callable[[Any, Any], list[Decision]]] = [_decisions._decode_batch]
    if _kernel.speedups is not None:
        found.append(
            _kernel.speedups.BatchDecoder(
                decision_type=Decision, fallback=_decisions._decode_batch
            ).decode
        )
    return found


@pytest.mark.parametrize("reply", BAD_BATCH_REPLIES, ids=repr)
@pytest.mark.parametrize("layered", [False, True])
def test_a_batch_decoder_raises_a_reply_error(reply: Any, layered: bool) -> None:
    """decode_batch (the C BatchDecoder, which hands what it does not take to the Python
    reference, and the reference itself) raises one of REPLY_ERRORS, never a decision."""
    found = _found(2, RATES if layered else RATE)
    for decode in _batch_decoders():
        with pytest.raises(_decisions.REPLY_ERRORS):
            decode(found, reply)


@pytest.mark.parametrize(
    "reply",
    [[1, 1, 1, 9, 0], [1, 1, 1, 9, 0, 0, 0, 0, 0], [1, 1, 1, 9, b"x", 0, 0, 0], 5, None],
    ids=repr,
)
def test_decode_raises_a_reply_error(reply: Any) -> None:
    """A one-rate or layered decision from a list of the wrong length or values raises one of
    REPLY_ERRORS (with the C DecisionMaker or without)."""
    with pytest.raises(_decisions.REPLY_ERRORS):
        _decisions.decode([RATE], 1, reply)
    with pytest.raises(_decisions.REPLY_ERRORS):
        _decisions.decode(RATES, 1, reply)


@pytest.mark.parametrize("reply", [[1, 1, 2], b"abcdef", 1, [1, 1, 2, 3, b"x", 5]], ids=repr)
def test_parse_acquire_raises_a_reply_error(reply: Any) -> None:
    """A slot acquisition's reply of the wrong shape raises one of REPLY_ERRORS."""
    with pytest.raises(_decisions.REPLY_ERRORS):
        _decisions.parse_acquire(3, 1, reply)

"""The Redis store's ``hit_all`` planned and decoded in C against the Python path.

``RedisBase._hit_all_python`` (the plan) and ``_decisions._decode_batch`` (the reading of
the reply) are the reference, and what ``RATEWARDEN_PURE=1`` runs. Random batches go to
both plans: the packed EVALSHA must be the same bytes, the route key, the script and the
validated calls the same, the clock asked as often, and a batch the Python path refuses
refused with the same error. A plainly valid batch of one-rate calls must be planned in C
(the kernel answers, not the fallback), anything else answered None. Random replies go to
both decoders, compared field by field. No server is needed here
(test_speedups_redis_store.py runs both against real ones).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from ratewarden import Rate
from ratewarden.algorithms import state_suffix
from ratewarden.decision import Decision
from ratewarden.storage import _decisions, _kernel
from ratewarden.storage._keys import escape
from ratewarden.storage._scripts import script
from ratewarden.storage.redis import RedisStore
from tests.storage.test_speedups_decisions import fields

pytestmark = pytest.mark.skipif(
    _kernel.speedups is None, reason="ratewarden.storage._speedups is not built"
)


class CountingClock:
    """A clock whose now is set by the test, counting how often it is asked."""

    def __init__(self, now: Any) -> None:
        self.now = now
        self.asked = 0

    def now_us(self) -> Any:
        self.asked += 1
        return self.now


# More rates than the kernel keeps (16) or than one batch names, some equal to others.
POOL = [Rate(limit, timedelta(seconds=period)) for limit in (1, 3, 7) for period in (1, 60)]
POOL += [Rate(n, timedelta(milliseconds=n + 1), burst=n + 2) for n in range(1, 30)]
ALGORITHMS = ["gcra", "fixed_window", "gcra", "token_bucket", "sliding_window", "leaky_bucket"]
ALGORITHMS += ["sliding_log", "nope"]

rate_arg = st.one_of(
    st.sampled_from(POOL),
    st.sampled_from(POOL).map(lambda r: (r,)),  # a new tuple each time: not found by identity
    st.sampled_from(POOL).map(lambda r: [r]),  # a list: looked up by value
    st.sampled_from(POOL).map(lambda r: Rate(r.limit, timedelta(microseconds=r.period_us))),
    st.sampled_from([(POOL[0], POOL[1]), [POOL[2], POOL[3]], (), [], "3/second", None, 5]),
)
key = st.one_of(
    st.sampled_from(["a", "b", "a", "%", "{", "}", "{a}", "x%7By", "%%{{}}", "", "k\u00e9y"]),
    st.text(st.characters(codec="ascii"), max_size=8),
    st.text(max_size=4),
    st.sampled_from([None, 7, b"a"]),
)
cost = st.one_of(
    st.sampled_from([0, 1, 1, 2, 10**6, 2**62, 2**63, 2**70, True, False, 1.0, -1, None]),
    st.integers(0, 100),
)
call = st.one_of(
    st.tuples(key, rate_arg, cost),
    st.tuples(key, rate_arg, cost).map(list),
    st.tuples(key, rate_arg),
)
calls = st.one_of(st.lists(call, max_size=6), st.lists(call, max_size=6).map(tuple), st.just(5))
nows = st.one_of(
    st.none(), st.integers(0, 2**63), st.sampled_from([0, -1, 2**64, 10**30, b"17", "x", 1.5])
)


def plan(make: Any, algorithm: Any, batch: Any) -> object:
    """What a plan gives: (method, args, reader function, its arguments), or the error."""
    try:
        call = make(algorithm, batch)
    except Exception as error:  # the errors themselves are compared
        return (type(error).__name__, str(error))
    read = getattr(call.read, "func", None), getattr(call.read, "args", None)
    return (call.method, call.args, read) if call.method else ("answer", call.read(None))


def plainly_valid(algorithm: Any, batch: Any) -> bool:
    """What the kernel must plan itself: one-rate calls, as _plan.batch would pass them."""
    if algorithm not in ALGORITHMS[:-1] or type(batch) not in (list, tuple):
        return False
    if not 0 < len(batch) <= 64:
        return False
    seen = set()
    for c in batch:
        if type(c) is not tuple or len(c) != 3:
            return False
        k, rates, n = c
        if type(k) is not str or not k or not k.isascii() or type(n) is not int:
            return False
        if not 0 <= n < 2**63:  # beyond 64 bits: the Python path
            return False
        if type(rates) is not Rate:
            if type(rates) not in (list, tuple) or len(rates) != 1:
                return False
            rates = rates[0]
        if (k, state_suffix(algorithm, rates)) in seen:  # one state twice: refused
            return False
        seen.add((k, state_suffix(algorithm, rates)))
    return True


@settings(max_examples=600, deadline=None)
@given(
    algorithm=st.sampled_from(ALGORITHMS),
    batches=st.lists(calls, min_size=1, max_size=8),
    now=nows,
    prefix=st.sampled_from(["rw", "p\u00e9", "a:b%"]),
)
def test_the_kernel_plans_every_batch_as_the_python_path(
    algorithm: str, batches: list[Any], now: Any, prefix: str
) -> None:
    """Same bytes, route key, script, found and errors; the clock asked as often; a plainly
    valid one-rate batch planned in C, any other left to the Python path."""
    clocks = CountingClock(now), CountingClock(now)
    stores = [
        RedisStore(redis.Redis(port=1), prefix=prefix, clock=None if now is None else clock)
        for clock in clocks
    ]
    for batch in batches:
        clocks[0].asked = clocks[1].asked = 0
        ours = plan(stores[0]._hit_all_kernel, algorithm, batch)
        reference = plan(stores[1]._hit_all_python, algorithm, batch)
        assert ours == reference
        assert clocks[0].asked == clocks[1].asked
        planned = stores[0]._planner.plan(algorithm, batch)  # asks the clock again when it plans
        taken = plainly_valid(algorithm, batch) and ours[0] == "eval"
        assert (planned is not None) == taken, (algorithm, batch)
    assert type(stores[0])._hit_all_call is type(stores[0])._hit_all_kernel


@settings(max_examples=300, deadline=None)
@given(
    algorithm=st.sampled_from(ALGORITHMS[:3]),
    keys=st.lists(
        st.one_of(
            st.sampled_from(["a", "{a}", "%", "b{x}", "user:1"]), st.text("ab{}%", min_size=1)
        ),
        min_size=1,
        max_size=4,
        unique=True,
    ),
    now=st.none() | st.integers(0, 2**60),
)
def test_on_a_cluster_one_slot_is_planned_and_several_left_to_python(
    algorithm: str, keys: list[str], now: int | None
) -> None:
    """The kernel's slot of an escaped key is redis-py's key_slot: a batch on one slot is
    planned (the same bytes as unclustered), on several it is None (the store then answers
    None in Python, sending nothing)."""
    clock = CountingClock(now)
    planner = _kernel.speedups.BatchPlanner(
        shapes=RedisStore(redis.Redis(port=1))._shapes,
        prefix="rw",
        script=script,
        now_us=None if now is None else clock.now_us,
        clustered=True,
        rate_type=Rate,
    )
    reference = RedisStore(redis.Redis(port=1), clock=None if now is None else CountingClock(now))
    batch = [(k, POOL[0], 1) for k in keys]
    slots = {key_slot(escape(k).encode()) for k in keys}
    planned = planner.plan(algorithm, batch)
    if len(slots) > 1:
        assert planned is None and clock.asked == 0
        return
    expected = reference._hit_all_python(algorithm, batch)
    assert planned is not None and planned[0] == expected.args
    assert planned[1] == expected.read.args[0]  # type: ignore[attr-defined]


# --- decoding ------------------------------------------------------------------------------------

SHAPES = RedisStore(redis.Redis(port=1))._shapes
ONE_RATE = [SHAPES.get(a, r, c) for a in ("gcra", "fixed_window") for r in POOL[:4] for c in (0, 3)]
LAYERED = SHAPES.get("gcra", (POOL[0], POOL[1]), 1)
NEVER = -1
micros = st.one_of(
    st.sampled_from([0, 1, NEVER, 999_999, 2**53, 2**53 + 1, -(2**53) - 1]),
    st.integers(-5, 10**9),
)
value = st.one_of(micros, micros, micros, st.sampled_from([1.0, b"1", None, True, 2**64]))


@st.composite
def replies(draw: st.DrawFn) -> tuple[list[Any], list[Any]]:
    found = [("k", draw(st.sampled_from(ONE_RATE))) for _ in range(draw(st.integers(0, 5)))]
    if draw(st.integers(0, 9)) == 0:
        found.append(("k", LAYERED))
    width = sum(6 * len(shape.rates) for _, shape in found)
    width += draw(st.sampled_from([0, 0, 0, 0, 1, -1, 6]))
    rows: list[Any] = [draw(st.integers(0, 2**60)), draw(st.sampled_from([1, 1, 0, 2, -1]))]
    for i in range(max(width, 0)):
        if i % 6 == 0:
            rows.append(draw(st.sampled_from([0, 1, 1, 2])))
        else:
            rows.append(draw(value) if draw(st.integers(0, 4)) else draw(micros))
    return found, rows


def decoded(decode: Any, found: list[Any], reply: list[Any]) -> object:
    try:
        return [fields(decision) for decision in decode(found, reply)]
    except Exception as error:  # the errors themselves are compared
        return (type(error).__name__, str(error))


@settings(max_examples=1500, deadline=None)
@given(case=replies())
def test_the_kernel_decodes_every_reply_as_the_python_path(case: Any) -> None:
    """Field by field (types and float reprs), the cost rule and NEVER included; what the C
    does not read (odd lengths, floats, layered calls) goes to the Python function."""
    found, reply = case
    assert decoded(_decisions.decode_batch, found, reply) == decoded(
        _decisions._decode_batch, found, reply
    )


def refuse(found: Any, reply: Any) -> list[Decision]:
    raise AssertionError("the fallback was called")


@settings(max_examples=300, deadline=None)
@given(
    shapes=st.lists(st.sampled_from(ONE_RATE), min_size=1, max_size=5),
    admitted=st.sampled_from([0, 1]),
    rows=st.data(),
)
def test_a_plain_reply_is_decoded_in_c(shapes: list[Any], admitted: int, rows: Any) -> None:
    """A reply of whole numbers in range, every call one-rate, never reaches the fallback."""
    found = [(str(i), shape) for i, shape in enumerate(shapes)]
    reply: list[Any] = [1, admitted]
    for _ in shapes:
        reply += [rows.draw(st.sampled_from([0, 1])), rows.draw(st.integers(-1, 10))]
        reply += [rows.draw(st.integers(-1, 2**53)) for _ in range(4)]
    decoder = _kernel.speedups.BatchDecoder(decision_type=Decision, fallback=refuse)
    assert decoded(decoder.decode, found, reply) == decoded(_decisions._decode_batch, found, reply)

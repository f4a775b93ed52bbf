"""What the refusals of bad input say: where, how much of the input, and what was meant.

Bad input to a limiter's method is a ConfigurationError that begins with the method called
(``Limiter.hit: cost 1.5 ...``; it began ``cost 1.5 ...``, naming no method), shows at most
the first 60 characters of a value (a 1 MB key was echoed whole, a rate string twice), and
changes nothing. Keyword refusals no longer offer the deprecated ``failure``; a misspelt
keyword of ``Rate.parse`` and an algorithm written ``'GCRA'`` get the name meant;
``ManualClock`` says which instant past 2155 it was given, not the limit plus one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import redis

from ratewarden import (
    AsyncLimiter,
    AsyncMemoryStore,
    ConfigurationError,
    Limiter,
    MemoryStore,
    Rate,
)
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import TwoTier

TEN = Rate.parse("10/minute")
MEGABYTE = 1_000_000
#: The longest a refusal of a megabyte of input may be: its words, and 60 characters of it.
SHORT = 400


def _refused(call: Callable[[], object]) -> str:
    with pytest.raises(ConfigurationError) as refused:
        call()
    return str(refused.value)


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (lambda: Limiter(MemoryStore(clock=ManualClock())), "Limiter.hit"),
        (lambda: Limiter(MemoryStore(clock=ManualClock()), lease=5), "Limiter.hit"),
        (lambda: TwoTier(MemoryStore(clock=ManualClock())), "TwoTier.hit"),
    ],
    ids=["plain", "lease", "TwoTier"],
)
@pytest.mark.parametrize(
    ("args", "kwargs", "words"),
    [
        (("k", TEN, 1.5), {}, "cost 1.5 must be a whole number"),
        (("k", TEN, -1), {}, "cost -1 must not be negative"),
        ((None, TEN), {}, "key None must be a string"),
        (("", TEN), {}, "key must not be empty"),
        (("k", TEN), {"failure_mode": "opn"}, "failure_mode 'opn' must be one of"),
        (("k", "10/minute"), {}, "rates '10/minute' must be a Rate"),
    ],
    ids=["fraction", "negative", "none-key", "empty-key", "failure-mode", "text-rate"],
)
def test_a_hit_s_bad_input_is_refused_naming_the_method_and_counts_nothing(
    make: Callable[[], Limiter], where: str, args: tuple[Any, ...], kwargs: Any, words: str
) -> None:
    """Each check (the store's, the flow's, the local tier's) says which method was called."""
    limiter = make()
    message = _refused(lambda: limiter.hit(*args, **kwargs))
    assert message.startswith(f"{where}: {words}"), message
    assert limiter.peek("k", TEN).remaining == 10


def test_peek_and_reset_say_their_own_name() -> None:
    """The methods made from flows name themselves too."""
    limiter = Limiter(MemoryStore(clock=ManualClock()))
    assert _refused(lambda: limiter.peek("", TEN)).startswith("Limiter.peek: key must not be")
    assert _refused(lambda: limiter.reset("k", [])).startswith("Limiter.reset: no rate given")
    message = _refused(lambda: limiter.peek("k", TEN, failure_mode="opn"))
    assert message.startswith("Limiter.peek: failure_mode 'opn' must be one of")


def test_a_message_that_names_its_method_is_not_named_twice() -> None:
    """``shadow`` and the keyword checks begin with the method already: no second prefix."""
    limiter = TwoTier(MemoryStore(clock=ManualClock()))
    message = _refused(lambda: limiter.hit("k", TEN, shadow="false"))  # type: ignore[arg-type]
    assert message.startswith("TwoTier.hit: shadow 'false' must be True or False"), message


async def test_the_asyncio_twin_and_hit_now_name_themselves() -> None:
    """``AsyncLimiter.hit`` (plain and not) and ``hit_now``, each by the name called."""
    limiter = AsyncLimiter(AsyncMemoryStore(clock=ManualClock()))
    with pytest.raises(ConfigurationError, match=r"^AsyncLimiter\.hit: cost 1\.5 must be"):
        await limiter.hit("k", TEN, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^AsyncLimiter\.hit: key None must be"):
        await limiter.hit(None, TEN, shadow=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"^AsyncLimiter\.peek: key must not be"):
        await limiter.peek("", TEN)
    hit_now = limiter.hit_now
    assert hit_now is not None
    with pytest.raises(ConfigurationError, match=r"^AsyncLimiter\.hit_now: cost -1 must not"):
        hit_now("k", TEN, -1)
    assert (await limiter.peek("k", TEN)).remaining == 10


def test_a_redis_store_s_refusal_names_the_method_too(redis_client: redis.Redis) -> None:
    """On Redis the store checks the key before anything is sent; the limiter names itself."""
    limiter = Limiter(RedisStore(redis_client, clock=ManualClock()))
    message = _refused(lambda: limiter.hit("k", TEN, 2.5))  # type: ignore[arg-type]
    assert message.startswith("Limiter.hit: cost 2.5 must be a whole number"), message
    assert limiter.peek("k", TEN).remaining == 10


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("x" * MEGABYTE + "\ud800", f"key {'x' * 60!r}... (1,000,001 characters) is not valid"),
        (b"x" * MEGABYTE, f"key {b'x' * 60!r}... (1,000,000 bytes) must be a string"),
    ],
    ids=["lone-surrogate", "bytes"],
)
def test_a_megabyte_key_is_shown_as_its_first_60_characters_and_its_length(
    key: object, shown: str
) -> None:
    """A key taken from a request goes into the message, and so into a log line."""
    limiter = Limiter(MemoryStore(clock=ManualClock()))
    message = _refused(lambda: limiter.hit(key, TEN))  # type: ignore[arg-type]
    assert message.startswith(f"Limiter.hit: {shown}"), message[:200]
    assert len(message) < SHORT


@pytest.mark.parametrize(
    "call",
    [
        lambda: Rate.parse("10/" + "x" * MEGABYTE),
        lambda: Rate.parse("x" * MEGABYTE + "/s"),
        lambda: Rate.parse("x" * MEGABYTE + "/0.5s"),
        lambda: Rate.parse_many(["", " "] * MEGABYTE),
        lambda: Rate(1, "x" * MEGABYTE),  # type: ignore[arg-type]
        lambda: Limiter().hit("k", ["a" * MEGABYTE]),  # type: ignore[list-item]
        lambda: Limiter().hit("k", "a" * MEGABYTE),  # type: ignore[arg-type]
        lambda: Limiter().hit("k", TEN, -(10**5000)),
    ],
    ids=["unit", "limit", "fraction", "parse-many", "period", "text-item", "text", "huge-int"],
)
def test_no_refusal_of_a_megabyte_of_input_is_long(call: Callable[[], object]) -> None:
    """Each part the message shows is cut to 60 characters (a number to its count of
    digits, which ``repr`` would refuse past 4,300)."""
    message = _refused(call)
    assert len(message) < SHORT, message[:200]
    assert "characters" in message or "digits" in message


def test_a_short_value_is_shown_whole() -> None:
    """Only long values are cut: a short one reads as its repr."""
    message = _refused(lambda: Rate.parse("10/fortnight"))
    assert message.startswith("rate '10/fortnight': unknown unit 'fortnight'; use one of us")


@pytest.mark.parametrize(
    ("call", "takes"),
    [
        (lambda: Limiter().peek("k", TEN, failure_mod="open"), "key, rates, failure_mode"),
        (
            lambda: TwoTier().hit("k", TEN, failure_mod="open"),
            "key, rates, cost, shadow, failure_mode, on_failure",
        ),
    ],
    ids=["peek", "TwoTier.hit"],
)
def test_a_deprecated_keyword_is_not_offered(call: Callable[[], object], takes: str) -> None:
    """``failure`` (now ``failure_mode``) is taken, with a warning, but not listed."""
    message = _refused(call)
    assert message.endswith(f"it takes {takes}; did you mean failure_mode?"), message


def test_a_deprecated_keyword_given_beside_a_misspelt_one_is_not_called_unknown() -> None:
    """Only the misspelt keyword is refused: ``failure`` is one the class still takes."""
    message = _refused(lambda: Limiter(failure="open", algoritm="gcra"))  # type: ignore[call-arg]
    assert message.startswith("Limiter: unknown keyword 'algoritm'; it takes store,"), message
    assert "failure," not in message and "'failure'" not in message


def test_the_deprecated_keyword_still_works_with_a_warning() -> None:
    """``peek(failure=...)`` and ``hit(failure=...)`` keep working for one release."""
    limiter = Limiter(MemoryStore(clock=ManualClock()))
    with pytest.warns(DeprecationWarning, match=r"peek\(failure=\.\.\.\) is deprecated"):
        assert limiter.peek("k", TEN, failure="open").remaining == 10
    with pytest.warns(DeprecationWarning, match=r"hit\(failure=\.\.\.\) is deprecated"):
        assert limiter.hit("k", TEN, failure="open").allowed


def test_rate_parse_refuses_a_misspelt_keyword_with_the_one_meant() -> None:
    """As ``Rate(...)`` does: not Python's bare TypeError."""
    message = _refused(lambda: Rate.parse("10/s", brust=5))  # type: ignore[call-arg]
    assert (
        message == "Rate.parse: unknown keyword 'brust'; it takes text, burst; did you mean burst?"
    )
    message = _refused(lambda: Rate.parse("10/s", 5, 6))  # type: ignore[call-arg]
    assert message.startswith("Rate.parse: 3 positional arguments given, but it takes at most 2")
    assert Rate.parse("10/s", burst=5) == Rate(10, 1, burst=5)


def test_units_are_read_whatever_their_case_so_capital_m_is_a_minute() -> None:
    """As docs/reference.md says: ``M`` is a minute, a month is ``mo``."""
    assert Rate.parse("1000/M") == Rate.parse("1000/minute")
    assert Rate.parse("1000/MO") == Rate.parse("1000/month")


def test_parse_many_skips_empty_parts() -> None:
    """As documented: ``"10/s;"`` and ``"10/s;;1/h"`` are the rates they name."""
    assert Rate.parse_many("10/s;;1/h;") == (Rate.parse("10/s"), Rate.parse("1/h"))
    assert _refused(lambda: Rate.parse_many(" ; ,")).endswith("no rate given")


@pytest.mark.parametrize(
    ("move", "instant"),
    [
        (lambda clock: clock.set(1e10), "ManualClock.set(10000000000.0): 10,000,000,000 s"),
        (
            lambda clock: clock.advance(10**20),
            "ManualClock.advance(100000000000000000000): 1e+20 s",
        ),
        (lambda clock: ManualClock(1e12), "ManualClock(1000000000000.0): 1,000,000,000,000 s"),
        (
            lambda clock: clock.advance_us(10**16),
            "ManualClock.advance_us(10000000000000000): 11,700,000,000 s",
        ),
        (
            lambda clock: clock.advance(10**400),
            "ManualClock.advance(a number of about 401 digits): more than 1e+308 s",
        ),
    ],
    ids=["set", "advance", "start", "advance_us", "advance-huge"],
)
def test_a_manual_clock_past_2155_names_the_instant_it_was_given(
    move: Callable[[ManualClock], object], instant: str
) -> None:
    """Not the last instant plus one (5,853,599,255 s), whatever was given; the clock stays."""
    clock = ManualClock()
    message = _refused(lambda: move(clock))
    assert message.startswith(f"{instant} from the epoch is past 5,853,599,254 s"), message
    assert "5853599255" not in message and "5,853,599,255" not in message
    assert clock.now() == 1_700_000_000.0


def test_the_manual_clock_still_reaches_its_last_instant() -> None:
    """The bound itself is taken; a microsecond past it is refused, said to the microsecond."""
    clock = ManualClock(5_853_599_254)
    clock.advance_us(740_991)
    with pytest.raises(ConfigurationError, match=re.escape("5,853,599,254.740992 s from the")):
        clock.advance_us(1)
    assert clock.now_us() == 5_853_599_254_740_991

"""Bad input to TwoTier is a ConfigurationError that names the value, and changes nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore, Rate
from ratewarden.algorithms import ALGORITHMS
from ratewarden.errors import ConfigurationError
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, TwoTier
from tests.tiers._helpers import CountingStore

RATE = Rate.parse("5/minute")


@pytest.mark.parametrize(
    ("key", "rates", "cost", "message"),
    [
        ("", RATE, 1, "key must not be empty"),
        (42, RATE, 1, "key 42 must be a string"),
        ("k", RATE, -1, "cost -1 must not be negative"),
        ("k", RATE, 1.5, "cost 1.5 must be a whole number"),
        ("k", RATE, True, "cost True must be a whole number"),
        ("k", "5/minute", 1, "must be a Rate or a list of Rates"),
        ("k", [], 1, "no rate given"),
        ("k", [RATE, RATE], 1, "the same rate twice"),
    ],
)
def test_bad_calls_raise_and_consume_nothing(
    key: object, rates: object, cost: object, message: str
) -> None:
    """Every bad argument is refused before any tier is touched: no store call, no local use."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store, local=1.0, lease=3)
    with pytest.raises(ConfigurationError, match=message):
        tiers.hit(key, rates, cost)  # type: ignore[arg-type]
    assert store.calls == 0 and len(tiers.local) == 0
    assert tiers.leases is not None and len(tiers.leases) == 0
    assert tiers.counts.as_dict() == dict.fromkeys(tiers.counts.as_dict(), 0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": ""}, "name '' must be a non-empty string"),
        ({"algorithm": "leaky"}, "leaky"),
        ({"negative_cache": 0}, "negative cache max_keys 0"),
        ({"breaker": object()}, "must be a CircuitBreaker"),
    ],
)
def test_bad_settings_are_configuration_errors(options: dict[str, object], message: str) -> None:
    """Each bad constructor option says what was wrong."""
    with pytest.raises(ConfigurationError, match=message):
        TwoTier(CountingStore(), **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "owner", "given"),
    [
        (lambda: TwoTier(Limiter(MemoryStore())), "TwoTier", "a Limiter"),
        (lambda: AsyncTwoTier(AsyncLimiter(AsyncMemoryStore())), "AsyncTwoTier", "an AsyncLimiter"),
        (lambda: Limiter(TwoTier(MemoryStore())), "Limiter", "a TwoTier"),
        (lambda: TwoTier(TwoTier(MemoryStore())), "TwoTier", "a TwoTier"),
    ],
    ids=["twotier-over-limiter", "async", "limiter-over-twotier", "twotier-over-twotier"],
)
def test_a_limiter_given_for_the_store_is_refused_at_construction(
    make: Callable[[], object], owner: str, given: str
) -> None:
    """TwoTier(Limiter(store)) was taken and raised 'TypeError: Limiter.hit() takes from 3
    to 4 positional arguments but 5 were given' at the first hit. Now the construction says
    a store goes there, what was given, and that a TwoTier is built over the store in place
    of a Limiter."""
    with pytest.raises(ConfigurationError) as refused:
        make()
    message = str(refused.value)
    assert message.startswith(f"{owner}: store is {given}, not a store; ")
    assert f"give {owner} the store itself ({owner}(store, ...))" in message
    assert "build it over the store in place of a Limiter" in message


@pytest.mark.parametrize(
    ("make", "owner"),
    [
        (lambda local: TwoTier(MemoryStore(), local=local), "TwoTier"),
        (lambda local: AsyncTwoTier(AsyncMemoryStore(), local=local), "AsyncTwoTier"),
        (lambda local: Limiter(MemoryStore(), local=local), "Limiter"),
    ],
    ids=["twotier", "async", "limiter"],
)
@pytest.mark.parametrize(
    ("local", "given", "hint"),
    [
        ("0.25", "'0.25' (a str)", "; write local=0.25, a number, not the string '0.25'"),
        ("50/second", "'50/second' (a str)", "; write local=Rate.parse('50/second')"),
        (True, "True (a bool)", ""),
        ({"share": 0.25}, "{'share': 0.25} (a dict)", ""),
    ],
)
def test_local_of_the_wrong_type_names_the_class_the_option_and_the_type(
    make: Callable[[object], object], owner: str, local: object, given: str, hint: str
) -> None:
    """TwoTier(store, local='0.25') said only "rates '0.25' must be a Rate or a list of
    Rates" (neither the option nor the class); now it names both, the type given, the kinds
    local= takes and, for a string that reads as a number or a rate, what to write."""
    with pytest.raises(ConfigurationError) as refused:
        make(local)
    assert str(refused.value) == (
        f"{owner}: local {given} must be a fraction of each rate per process, above 0 and at "
        "most 1 (local=0.25), a Rate, a list of Rates, or None (no local bucket)" + hint
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: Limiter(MemoryStore(), algorithm="concurrency"),
        lambda: AsyncLimiter(AsyncMemoryStore(), algorithm="concurrency"),
        lambda: TwoTier(MemoryStore(), algorithm="concurrency"),
    ],
    ids=["limiter", "async", "twotier"],
)
def test_algorithm_concurrency_points_to_the_slots(make: Callable[[], object]) -> None:
    """algorithms.md's table lists concurrency beside the rate algorithms, so it is tried as
    algorithm=; it was refused as an unknown algorithm, with the choices only. Now the
    refusal says it is not a rate and names the limiter's slot API, which every limiter has."""
    with pytest.raises(ConfigurationError) as refused:
        make()
    message = str(refused.value)
    assert message.startswith("algorithm 'concurrency' is not a rate, so it is not an algorithm=")
    assert "limiter.slot(key, limit, ttl=...)" in message
    assert "limiter.acquire_slot(key, limit, ttl=...) and release_slot(lease)" in message
    assert "docs/algorithms.md#concurrency" in message
    assert message.endswith("one of: " + ", ".join(sorted(ALGORITHMS)))


@pytest.mark.parametrize(
    ("twin", "store"),
    [(TwoTier, MemoryStore), (AsyncTwoTier, AsyncMemoryStore)],
    ids=["sync", "async"],
)
def test_failure_and_failure_mode_both_given_are_refused_whatever_the_value(
    twin: Callable[..., object], store: Callable[[], object]
) -> None:
    """TwoTier(failure="local", failure_mode="open") was taken as local with only the
    deprecation warning: "open" is the default, and was the value compared with, so giving it
    could not be told from leaving it out ("closed" was refused). Now both given is refused
    whatever failure_mode says, and failure_mode="open" alone or failure= alone still work."""
    for given in ("open", "closed", "local"):
        with pytest.raises(ConfigurationError) as refused:
            twin(store(), failure="local", failure_mode=given)
        assert str(refused.value) == (
            f"{twin.__name__}: failure= is the deprecated name of failure_mode=; give "
            f"failure_mode= only (got failure='local' and failure_mode={given!r})"
        )
        assert twin(store(), failure_mode=given).failure_mode == given  # type: ignore[attr-defined]
        with pytest.warns(DeprecationWarning, match=r"\(failure=\.\.\.\) is deprecated"):
            assert twin(store(), failure=given).failure_mode == given  # type: ignore[attr-defined]
    assert twin(store()).failure_mode == "open"  # type: ignore[attr-defined]

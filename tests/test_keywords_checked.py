# mypy: disable-error-code="call-arg, arg-type, misc"
# (the misspelt keywords, and the extra positional argument, are what these tests give)
"""A misspelt keyword is refused naming the public class, the keyword and the keywords it takes.

The public classes get their constructor from a private base, so Python's own error named the
base: ``Limiter(store, algoritm="gcra")`` raised ``TypeError: DecisionCore.__init__() got an
unexpected keyword argument 'algoritm'``, ``MemoryStore(clok=...)`` named ``MemoryTable``,
``TwoTier(store, leese=5)`` ``_TwoTierDefaults`` and ``HotKeyLimiter(..., hotkeys=[])``
``_HotBase``. ``checks.keywords_checked`` on the base's ``__init__`` makes each a
ConfigurationError: ``Limiter: unknown keyword 'algoritm'; it takes store, algorithm, ...;
did you mean algorithm?``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore, Rate
from ratewarden.budgets import (
    Account,
    AsyncFairShare,
    AsyncFleetShedder,
    AsyncTokenBudget,
    BudgetRouter,
    FairShare,
    FleetShedder,
    LoadShedder,
    TokenBudget,
)
from ratewarden.client import AsyncRetryTransport, RetryTransport
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import AsyncCellLimiter, AsyncHotKeyLimiter, CellLimiter, HotKeyLimiter
from ratewarden.middleware import (
    RateLimitMiddleware,
    Rule,
    RuleSet,
    SheddingMiddleware,
    TokenBudgetMiddleware,
    WSGIRateLimitMiddleware,
)
from ratewarden.middleware.idempotency import IdempotencyMiddleware
from ratewarden.storage.idempotency import MemoryIdempotencyStore
from ratewarden.tiers import AsyncTwoTier, TwoTier

LIMITS = {"tokens": "1000/minute"}


def _app(*_: object) -> None:
    """An app the middleware wraps; never called here."""


def _hot(store: MemoryStore) -> HotKeyLimiter:
    return HotKeyLimiter(store, CellLimiter(store), hotkeys=["k"])


def _async_hot(store: AsyncMemoryStore) -> AsyncHotKeyLimiter:
    return AsyncHotKeyLimiter(store, AsyncCellLimiter(store), hotkeys=["k"])


def _router() -> BudgetRouter:
    budget = TokenBudget(MemoryStore(), LIMITS, max_output_tokens=100)
    upstream = Account("openai", budget, "openai:gpt")
    return BudgetRouter(tennant=None, upstreams=[upstream])


# (class name, what builds it with a misspelt keyword, the misspelt keyword, the one meant)
CASES: list[tuple[str, Callable[[], object], str, str]] = [
    ("Limiter", lambda: Limiter(MemoryStore(), algoritm="gcra"), "algoritm", "algorithm"),
    (
        "AsyncLimiter",
        lambda: AsyncLimiter(AsyncMemoryStore(), algoritm="gcra"),
        "algoritm",
        "algorithm",
    ),
    ("MemoryStore", lambda: MemoryStore(clok=None), "clok", "clock"),
    ("AsyncMemoryStore", lambda: AsyncMemoryStore(max_key=5), "max_key", "max_keys"),
    ("TwoTier", lambda: TwoTier(MemoryStore(), leese=5), "leese", "lease"),
    ("AsyncTwoTier", lambda: AsyncTwoTier(AsyncMemoryStore(), leese=5), "leese", "lease"),
    ("HotKeyLimiter", lambda: _hot(MemoryStore()), "hotkeys", "hot_keys"),
    ("AsyncHotKeyLimiter", lambda: _async_hot(AsyncMemoryStore()), "hotkeys", "hot_keys"),
    ("CellLimiter", lambda: CellLimiter(MemoryStore(), cels=3), "cels", "cells"),
    ("AsyncCellLimiter", lambda: AsyncCellLimiter(AsyncMemoryStore(), cels=3), "cels", "cells"),
    (
        "TokenBudget",
        lambda: TokenBudget(MemoryStore(), LIMITS, max_output_token=100),
        "max_output_token",
        "max_output_tokens",
    ),
    (
        "AsyncTokenBudget",
        lambda: AsyncTokenBudget(AsyncMemoryStore(), LIMITS, max_output_token=100),
        "max_output_token",
        "max_output_tokens",
    ),
    (
        "FairShare",
        lambda: FairShare(MemoryStore(), "100/minute", {"a": 1}, default_wieght=2),
        "default_wieght",
        "default_weight",
    ),
    (
        "AsyncFairShare",
        lambda: AsyncFairShare(AsyncMemoryStore(), "100/minute", {"a": 1}, default_wieght=2),
        "default_wieght",
        "default_weight",
    ),
    ("FleetShedder", lambda: FleetShedder(Limiter(), "api", 10, tll=5), "tll", "ttl"),
    (
        "AsyncFleetShedder",
        lambda: AsyncFleetShedder(AsyncLimiter(), "api", 10, tll=5),
        "tll",
        "ttl",
    ),
    ("BudgetRouter", _router, "tennant", "tenant"),
    (
        "RateLimitMiddleware",
        lambda: RateLimitMiddleware(
            _app,
            limiter=AsyncLimiter(),
            rules=RuleSet([Rule("ip", "5/minute")]),
            failure_mod="open",
        ),
        "failure_mod",
        "failure_mode",
    ),
    (
        "WSGIRateLimitMiddleware",
        lambda: WSGIRateLimitMiddleware(
            _app,
            limiter=Limiter(),
            rules=RuleSet([Rule("ip", "5/minute")]),
            nmae="web",
        ),
        "nmae",
        "name",
    ),
    (
        "SheddingMiddleware",
        lambda: SheddingMiddleware(_app, shedder=LoadShedder(lambda: 0.0), statsu=429),
        "statsu",
        "status",
    ),
    (
        "TokenBudgetMiddleware",
        lambda: TokenBudgetMiddleware(
            _app,
            budget=AsyncTokenBudget(AsyncMemoryStore(), LIMITS, max_output_tokens=100),
            estimate=lambda request: 1,
            read_bdy=True,
        ),
        "read_bdy",
        "read_body",
    ),
    (
        "IdempotencyMiddleware",
        lambda: IdempotencyMiddleware(_app, MemoryIdempotencyStore(), lock_tll=5),
        "lock_tll",
        "lock_ttl",
    ),
    (
        "MemoryIdempotencyStore",
        lambda: MemoryIdempotencyStore(max_entires=5),
        "max_entires",
        "max_entries",
    ),
    ("RetryTransport", lambda: RetryTransport(polcy=None), "polcy", "policy"),
    ("AsyncRetryTransport", lambda: AsyncRetryTransport(polcy=None), "polcy", "policy"),
]


@pytest.mark.parametrize(("owner", "build", "typo", "meant"), CASES, ids=[c[0] for c in CASES])
def test_a_misspelt_keyword_is_refused_naming_the_public_class(
    owner: str, build: Callable[[], object], typo: str, meant: str
) -> None:
    """The public class, the keyword, every keyword it takes and the nearest; no private name."""
    with pytest.raises(ConfigurationError) as refused:
        build()
    message = str(refused.value)
    assert message.startswith(f"{owner}: unknown keyword {typo!r}; it takes ")
    assert message.endswith(f"; did you mean {meant}?")
    assert f" {meant}," in message or f" {meant};" in message
    assert "__init__" not in message and "_Base" not in message and "Core" not in message


def test_every_keyword_it_takes_is_listed_and_a_renamed_one_is_not_offered() -> None:
    """Limiter lists its keywords in signature order; ``failure`` (renamed to
    ``failure_mode``) is still taken but not offered."""
    with pytest.raises(ConfigurationError) as refused:
        Limiter(MemoryStore(), nmae="x")
    takes = str(refused.value).split("; it takes ")[1].split("; did you mean")[0]
    names = [n for n in inspect.signature(Limiter).parameters if n != "failure"]
    assert takes.split(", ") == names
    with pytest.warns(DeprecationWarning) as caught:
        Limiter(MemoryStore(), failure="open")
        TwoTier(MemoryStore(), failure="open")
    assert [w.filename for w in caught] == [__file__, __file__]  # the building lines, still


def test_several_misspelt_keywords_are_named_together() -> None:
    """All the unknown keywords in one message, sorted, each with its nearest."""
    with pytest.raises(ConfigurationError) as refused:
        TwoTier(MemoryStore(), leese=5, nmae="x")
    message = str(refused.value)
    assert message.startswith("TwoTier: unknown keywords 'leese', 'nmae'; it takes store, ")
    assert message.endswith("; did you mean lease, name?")


def test_a_keyword_far_from_any_gets_no_guess() -> None:
    """Nothing close: the list of keywords it takes, and no "did you mean"."""
    with pytest.raises(ConfigurationError) as refused:
        MemoryStore(zzzzzz=1)
    assert str(refused.value) == (
        "MemoryStore: unknown keyword 'zzzzzz'; it takes clock, max_keys, prefix"
    )


def test_too_many_positional_arguments_name_the_public_class() -> None:
    """Limiter(store, "gcra", hook) named DecisionCore.__init__ too; now Limiter and the
    positional parameters it takes."""
    with pytest.raises(ConfigurationError) as refused:
        Limiter(MemoryStore(), "gcra", None)
    assert str(refused.value) == (
        "Limiter: 3 positional arguments given, but it takes at most 2 (store, algorithm); "
        "give the rest by keyword"
    )


def test_the_right_keywords_still_build_and_decide() -> None:
    """The check is on unknown keywords only: a Limiter and a TwoTier with their keywords
    work, and the signature still shows the base's parameters."""
    rate = Rate.parse("1/second")
    assert Limiter(MemoryStore(max_keys=10), algorithm="sliding_window").hit("k", rate).allowed
    assert TwoTier(MemoryStore(), lease=5).hit("k", rate).allowed
    assert "algorithm" in inspect.signature(Limiter).parameters
    assert "max_keys" in inspect.signature(MemoryStore).parameters

# mypy: disable-error-code="call-arg, arg-type, misc"
# (the misspelt keywords, and the extra positional arguments, are what these tests give)
"""The constructors reference.md names refuse a keyword they do not take, or too many
positional arguments, with a ConfigurationError naming the class, the keyword and the nearest
one; the list in reference.md is exactly the classes that do.

``Rate(10, 1, brust=2)``, ``ManualClock(start=1)``, ``Rule("n", rate, pahts=["/"])`` and the
like raised Python's ``TypeError: Rate.__init__() got an unexpected keyword argument 'brust'``
(no "did you mean", and not the ValueError a ConfigurationError is), though reference.md promised
the ConfigurationError for every constructor. ``MemoryStore(None)`` said "1 positional
arguments given, but it takes at most 0 (); give the rest by keyword".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
import redis.asyncio as aredis

import ratewarden
from ratewarden import Rate, budgets, client, hotkeys, middleware, plan, regions, simulate, tiers
from ratewarden.checks import keywords_checked
from ratewarden.errors import ConfigurationError
from ratewarden.headers import HeaderOptions
from ratewarden.metrics import LogRateLimiter, PrometheusMetrics
from ratewarden.middleware import idempotency as idempotency_middleware
from ratewarden.simulate import patterns
from ratewarden.storage import idempotency as idempotency_stores
from ratewarden.storage.memory_regions import AsyncMemoryRegionStore, MemoryRegionStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
from ratewarden.storage.split import AsyncSplitStore
from ratewarden.testing import DecisionRecorder, ManualClock
from ratewarden.topk import SpaceSaving

RATE = Rate(5, 60)

# (class name, what builds it with a misspelt keyword, the keyword meant)
MISSPELT: list[tuple[str, Callable[[], object], str]] = [
    ("Rate", lambda: Rate(10, 1, brust=2), "burst"),
    ("ManualClock", lambda: ManualClock(start_epoch_second=1), "start_epoch_seconds"),
    ("DecisionRecorder", lambda: DecisionRecorder(record=[]), "records"),
    ("NegativeCache", lambda: tiers.NegativeCache(max_key=1), "max_keys"),
    ("CircuitBreaker", lambda: ratewarden.CircuitBreaker(failure=3), "failures"),
    ("Rule", lambda: middleware.Rule("n", RATE, pahts=["/"]), "paths"),
    ("Denied", lambda: middleware.Denied(b"", stauts=429), "status"),
    ("HeaderOptions", lambda: HeaderOptions(drafts="draft-11"), "draft"),
    ("LogRateLimiter", lambda: LogRateLimiter(intervl=1), "interval"),
    ("SpaceSaving", lambda: SpaceSaving(capacty=1), "capacity"),
    ("RedisStore", lambda: RedisStore(redis.Redis(port=1), timout=1), "timeout"),
    ("AsyncRedisStore", lambda: AsyncRedisStore(aredis.Redis(port=1), prefx="x"), "prefix"),
    ("RuleSet", lambda: middleware.RuleSet([], default_ky=None), "default_key"),
    ("RetryPolicy", lambda: client.RetryPolicy(max_attemps=3), "max_attempts"),
]

# (class name, what builds it with one positional argument too many, what it takes)
TOO_MANY: list[tuple[str, Callable[[], object], str]] = [
    ("Rate", lambda: Rate(10, 1, 2, 3), "at most 3 (limit, period, burst)"),
    ("ManualClock", lambda: ManualClock(1, 2), "at most 1 (start_epoch_seconds)"),
    ("DecisionRecorder", lambda: DecisionRecorder([], None), "at most 1 (records)"),
    ("NegativeCache", lambda: tiers.NegativeCache(1, 2), "at most 1 (max_keys)"),
    ("Rule", lambda: middleware.Rule("n", RATE, None), "at most 2 (name, rates)"),
    ("Denied", lambda: middleware.Denied(b"", 429), "at most 1 (body)"),
    ("LogRateLimiter", lambda: LogRateLimiter(1, None), "at most 1 (interval)"),
    ("SpaceSaving", lambda: SpaceSaving(1, 2), "at most 1 (capacity)"),
    ("RedisStore", lambda: RedisStore(redis.Redis(port=1), None, None), "at most 1 (client)"),
    ("RuleSet", lambda: middleware.RuleSet([], None, None), "at most 1 (rules)"),
]

# Every class reference.md says refuses them, by the name it gives.
COVERED: dict[str, type] = {
    cls.__name__: cls
    for cls in [
        Rate,
        ratewarden.Limiter,
        ratewarden.AsyncLimiter,
        ratewarden.MemoryStore,
        ratewarden.AsyncMemoryStore,
        ratewarden.TwoTier,
        ratewarden.AsyncTwoTier,
        ratewarden.CircuitBreaker,
        tiers.NegativeCache,
        ratewarden.TokenBudget,
        ratewarden.AsyncTokenBudget,
        budgets.BudgetRouter,
        budgets.AsyncBudgetRouter,
        budgets.FairShare,
        budgets.AsyncFairShare,
        budgets.FleetShedder,
        budgets.AsyncFleetShedder,
        hotkeys.CellLimiter,
        hotkeys.AsyncCellLimiter,
        hotkeys.HotKeyLimiter,
        hotkeys.AsyncHotKeyLimiter,
        middleware.Rule,
        middleware.Denied,
        middleware.RateLimitMiddleware,
        middleware.WSGIRateLimitMiddleware,
        middleware.SheddingMiddleware,
        middleware.WSGISheddingMiddleware,
        middleware.TokenBudgetMiddleware,
        middleware.WSGITokenBudgetMiddleware,
        idempotency_middleware.IdempotencyMiddleware,
        idempotency_middleware.WSGIIdempotencyMiddleware,
        idempotency_stores.MemoryIdempotencyStore,
        idempotency_stores.AsyncMemoryIdempotencyStore,
        idempotency_stores.RedisIdempotencyStore,
        idempotency_stores.AsyncRedisIdempotencyStore,
        RedisStore,
        AsyncRedisStore,
        middleware.RuleSet,
        middleware.ClientIP,
        middleware.SlotPolicy,
        budgets.Account,
        budgets.LoadShedder,
        budgets.ShedPolicy,
        hotkeys.HotKeyDetector,
        hotkeys.SlotMap,
        PrometheusMetrics,
        RegionStore,
        AsyncRegionStore,
        MemoryRegionStore,
        AsyncMemoryRegionStore,
        AsyncSplitStore,
        regions.ReconciledBudget,
        regions.AsyncReconciledBudget,
        regions.RegionalQuota,
        regions.AsyncRegionalQuota,
        regions.HomeRegion,
        regions.AsyncHomeRegion,
        regions.DemandExchange,
        regions.AsyncDemandExchange,
        regions.SyncThread,
        regions.SyncTask,
        patterns.Steady,
        patterns.Poisson,
        patterns.OnOff,
        patterns.BoundaryBurst,
        patterns.RetryStorm,
        patterns.Replay,
        simulate.Partition,
        plan.PlanInput,
        plan.Region,
        client.RetryPolicy,
        client.RetryBudget,
        client.RetryTransport,
        client.AsyncRetryTransport,
        HeaderOptions,
        LogRateLimiter,
        SpaceSaving,
        ManualClock,
        DecisionRecorder,
    ]
}

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference.md"


@pytest.mark.parametrize(("owner", "build", "meant"), MISSPELT, ids=[c[0] for c in MISSPELT])
def test_a_misspelt_keyword_is_a_configuration_error_with_the_nearest(
    owner: str, build: Callable[[], object], meant: str
) -> None:
    """The class, the keyword, the keywords it takes and the nearest; no ``__init__``."""
    with pytest.raises(ConfigurationError) as refused:
        build()
    message = str(refused.value)
    assert re.match(rf"{owner}: unknown keyword '\w+'; it takes ", message), message
    assert message.endswith(f"; did you mean {meant}?")
    assert "__init__" not in message


@pytest.mark.parametrize(("owner", "build", "takes"), TOO_MANY, ids=[c[0] for c in TOO_MANY])
def test_too_many_positional_arguments_are_a_configuration_error(
    owner: str, build: Callable[[], object], takes: str
) -> None:
    """How many were given and the positional parameters it takes, by name."""
    with pytest.raises(ConfigurationError) as refused:
        build()
    assert str(refused.value).startswith(f"{owner}: ")
    assert f" positional arguments given, but it takes {takes}" in str(refused.value)


def test_a_class_that_takes_no_positional_argument_says_so_in_words() -> None:
    """``MemoryStore(None)``: one argument (singular), it takes none, and the keywords to use;
    not "1 positional arguments given, but it takes at most 0 ()"."""
    with pytest.raises(ConfigurationError) as refused:
        ratewarden.MemoryStore(None)
    assert str(refused.value) == (
        "MemoryStore: 1 positional argument given, but it takes none; "
        "give its options by keyword (clock, max_keys, prefix)"
    )
    with pytest.raises(ConfigurationError, match=r"^MemoryStore: 2 positional arguments given"):
        ratewarden.MemoryStore(None, 5)


def test_only_a_class_with_keyword_only_parameters_is_told_to_give_the_rest_by_keyword() -> None:
    """Rate and ManualClock take every parameter by position: nothing more to give by name."""
    with pytest.raises(ConfigurationError) as refused:
        ManualClock(1, 2)
    assert str(refused.value) == (
        "ManualClock: 2 positional arguments given, but it takes at most 1 (start_epoch_seconds)"
    )
    with pytest.raises(ConfigurationError, match=r"give the rest by keyword$"):
        LogRateLimiter(1, None)


class _Twin:
    """A class of Rate's signature under checks.keywords_checked (renamed Rate below)."""

    @keywords_checked
    def __init__(self, limit: int, period: float, burst: int | None = None) -> None:
        """Never reached by these tests."""


_Twin.__name__ = "Rate"


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((10, 1), {"brust": 2}),
        ((10, 1), {"zz": 1, "brust": 2}),
        ((10, 1, 2, 3), {}),
        ((), {"x": 1}),
    ],
)
def test_rate_refuses_them_in_the_words_of_keywords_checked(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    """Rate cannot use checks.keywords_checked (checks imports rate); its own check says the
    same words for the same mistakes."""
    with pytest.raises(ConfigurationError) as twin:
        _Twin(*args, **kwargs)
    with pytest.raises(ConfigurationError) as rate:
        Rate(*args, **kwargs)
    assert str(rate.value) == str(twin.value)


def test_rate_still_builds_and_reports_its_own_type_errors() -> None:
    """The check is on the error path only: good calls build, by position or by name; a
    missing argument is still Python's TypeError; the signature is Rate's."""
    assert Rate(10, 1) == Rate(limit=10, period=1) == Rate.parse("10/s")
    assert Rate(10, 1, 2).burst == 2
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'period'"):
        Rate(10)
    assert str(__import__("inspect").signature(Rate)).startswith("(limit: ")


def test_decision_recorder_no_longer_takes_its_lock() -> None:
    """Its lock is made for it: ``_lock`` is not a keyword to offer or take."""
    with pytest.raises(ConfigurationError, match=r"unknown keyword '_lock'; it takes records$"):
        DecisionRecorder(_lock=None)
    assert DecisionRecorder().records == []


def _named_in_reference() -> set[str]:
    """The classes reference.md's opening paragraph on constructors names."""
    text = REFERENCE.read_text("utf-8")
    start = text.index("A constructor of these classes")
    paragraph = text[start : text.index("\n\n", start)]
    covered = paragraph[paragraph.index("):") : paragraph.index("`MemcacheStore`")]
    return set(re.findall(r"`([A-Z]\w+)`", covered))


def test_reference_names_exactly_the_classes_that_refuse_them() -> None:
    """Each class the paragraph names refuses an unknown keyword with a ConfigurationError
    naming it; and the paragraph names each class this test checks."""
    assert _named_in_reference() == set(COVERED)
    for name, cls in COVERED.items():
        with pytest.raises(ConfigurationError, match=f"^{name}: unknown keyword 'zzzz_bogus'"):
            cls(zzzz_bogus=1)


def test_a_deprecation_still_names_the_building_line() -> None:
    """The keyword check is one frame more between the caller and a constructor's warning:
    the deprecated redis clients of DemandExchange and ReconciledBudget still name the line
    that built them (no server is asked: the stores are made, not used)."""
    clients = {"us": redis.Redis(port=1), "eu": redis.Redis(port=2)}
    rates = {"us": Rate(10, 60), "eu": Rate(10, 60)}
    with pytest.warns(DeprecationWarning) as caught:
        regions.DemandExchange("us", clients)
        regions.ReconciledBudget(
            "us", clients["us"], {"eu": clients["eu"]}, rates, sync_interval=1, replication_lag=1
        )
    assert [w.filename for w in caught] == [__file__, __file__]

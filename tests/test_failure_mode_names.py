"""One name for the failure mode: ``failure_mode=`` everywhere, the old names for one release.

The limiters and two-tier limiters take ``failure_mode=`` (constructor, ``hit``,
``peek``) and show it as ``limiter.failure_mode``; the old ``failure=`` still
works, with a ``DeprecationWarning`` naming the new keyword and pointing at the
caller's line, and giving both names is an error. ``FailureReport`` takes
``failure_mode`` (``mode=`` deprecated). ``Metrics.degraded`` takes
``failure_mode=``, the Prometheus label of ``ratewarden_degraded_total`` is
``failure_mode``, and a ``Metrics`` subclass still written with ``mode`` is
adapted, with a warning, so that it keeps being called.

The answers in an outage come from a real redis-server address nobody listens on.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, Rate
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.limiter import FailureReport
from ratewarden.metrics import Metrics, PrometheusMetrics
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, TwoTier
from tests._servers import HOST, STORE_TIMEOUT, free_port

pytestmark = pytest.mark.timeout(30)

RATE = Rate.parse("5/minute")


@pytest.fixture
def dead() -> Iterator[RedisStore]:
    """A RedisStore on a loopback port with no server: every call fails, quickly."""
    store = RedisStore.from_url(f"redis://{HOST}:{free_port()}/0", timeout=STORE_TIMEOUT)
    yield store
    store.close()


@pytest.mark.parametrize("kind", [Limiter, TwoTier])
def test_the_old_constructor_keyword_warns_at_the_callers_line_and_still_decides(
    dead: RedisStore, kind: Any
) -> None:
    """``Limiter(store, failure="closed")`` / ``TwoTier(...)``: a DeprecationWarning naming
    ``failure_mode=`` and this file; the limiter's failure mode is ``closed`` and answers."""
    with pytest.warns(DeprecationWarning) as caught:
        limiter = kind(dead, failure="closed")
    assert [str(w.message) for w in caught] == [
        f"{kind.__name__}(failure=...) is deprecated; use failure_mode="
    ]
    assert caught[0].filename == __file__
    assert limiter.failure_mode == "closed"
    decision = limiter.hit("k", RATE)
    assert (decision.allowed, decision.degraded) == (False, "closed")


async def test_the_asyncio_twins_take_the_old_keyword_too() -> None:
    """``AsyncLimiter(failure=...)`` and ``AsyncTwoTier(failure=...)`` warn and set it."""
    store = AsyncMemoryStore(clock=ManualClock())
    with pytest.warns(DeprecationWarning, match=r"AsyncLimiter\(failure=\.\.\.\)"):
        assert AsyncLimiter(store, failure="local").failure_mode == "local"
    with pytest.warns(DeprecationWarning, match=r"AsyncTwoTier\(failure=\.\.\.\)"):
        assert AsyncTwoTier(store, failure="closed").failure_mode == "closed"


def test_hit_and_peek_take_the_old_keyword_with_a_warning(dead: RedisStore) -> None:
    """``hit(..., failure=)`` and ``peek(..., failure=)`` answer as ``failure_mode=`` does, each
    with a warning that names the method and points at this file."""
    limiter = Limiter(dead)
    with pytest.warns(DeprecationWarning) as caught:
        hit = limiter.hit("k", RATE, failure="closed")
        peek = limiter.peek("k", RATE, failure="open")
    assert [str(w.message) for w in caught] == [
        "hit(failure=...) is deprecated; use failure_mode=",
        "peek(failure=...) is deprecated; use failure_mode=",
    ]
    assert [w.filename for w in caught] == [__file__, __file__]
    assert (hit.allowed, hit.degraded) == (False, "closed")
    assert (peek.allowed, peek.degraded) == (True, "open")


async def test_the_asyncio_hit_and_hit_now_take_the_old_keyword() -> None:
    """``await AsyncLimiter.hit(..., failure=)`` over a dead store answers by it; ``hit_now``
    (the blocking view of an in-process store) takes it too; both warn."""
    store = AsyncRedisStore.from_url(f"redis://{HOST}:{free_port()}/0", timeout=STORE_TIMEOUT)
    try:
        with pytest.warns(DeprecationWarning, match=r"hit\(failure=\.\.\.\)") as caught:
            decision = await AsyncLimiter(store).hit("k", RATE, failure="open")
    finally:
        await store.aclose()
    assert caught[0].filename == __file__
    assert (decision.allowed, decision.degraded) == (True, "open")
    hit_now = AsyncLimiter(AsyncMemoryStore(clock=ManualClock())).hit_now
    assert hit_now is not None
    with pytest.warns(DeprecationWarning, match=r"hit\(failure=\.\.\.\)"):
        assert hit_now("k", RATE, failure="open").allowed  # healthy: the store decides


def test_the_new_keyword_warns_nothing(dead: RedisStore) -> None:
    """``failure_mode=`` on the constructor, ``hit`` and ``peek``: no warning at all."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        limiter = Limiter(dead, failure_mode="open")
        assert limiter.hit("k", RATE).degraded == "open"
        assert limiter.hit("k", RATE, failure_mode="closed").degraded == "closed"
        assert limiter.peek("k", RATE, failure_mode="closed").degraded == "closed"
        assert TwoTier(dead).failure_mode == "open"
        assert "failure_mode='open'" in repr(limiter)


def test_both_names_at_once_is_a_configuration_error(dead: RedisStore) -> None:
    """The old and the new keyword together are refused, saying which to keep."""
    with pytest.raises(ConfigurationError, match="give failure_mode= only"):
        Limiter(dead, failure="open", failure_mode="closed")
    with pytest.raises(ConfigurationError, match="give failure_mode= only"):
        TwoTier(dead, failure="open", failure_mode="closed")
    with pytest.raises(ConfigurationError, match="give failure_mode= only"):
        Limiter(dead).hit("k", RATE, failure="open", failure_mode="closed")


def test_an_old_bad_value_is_still_named_as_failure_mode() -> None:
    """A bad value through the old keyword gets the new message: what and which values."""
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ConfigurationError, match="failure_mode 'shut' must be one of open"),
    ):
        TwoTier(failure="shut", clock=ManualClock())


def test_the_old_attributes_warn_and_read_the_new_ones() -> None:
    """``limiter.failure`` and ``FailureReport.mode`` are the new attributes, with a warning."""
    limiter = Limiter(failure_mode="closed", clock=ManualClock())
    with pytest.warns(DeprecationWarning, match="read limiter.failure_mode"):
        assert limiter.failure == "closed"
    report = FailureReport("open", name="api", clock=ManualClock())
    assert report.failure_mode == "open"
    with pytest.warns(DeprecationWarning, match="read failure_mode"):
        assert report.mode == "open"


def test_failure_report_takes_its_old_keyword_with_a_warning() -> None:
    """``FailureReport(mode="closed", ...)`` warns and reports ``closed``; none is refused."""
    with pytest.warns(DeprecationWarning, match=r"FailureReport\(mode=\.\.\.\)") as caught:
        report = FailureReport(mode="closed", name="api", clock=ManualClock())
    assert caught[0].filename == __file__
    assert report.failure_mode == "closed"
    with pytest.raises(ConfigurationError, match="FailureReport needs a failure_mode"):
        FailureReport(name="api", clock=ManualClock())


def test_the_prometheus_label_is_failure_mode(dead: RedisStore) -> None:
    """A degraded decision is counted on ``ratewarden_degraded_total{rule, failure_mode,
    reason}``; no series has a ``mode`` label."""
    registry = CollectorRegistry()
    limiter = Limiter(dead, failure_mode="open", metrics=PrometheusMetrics(registry), name="api")
    limiter.hit("k", RATE)
    labels = {"rule": "api", "failure_mode": "open", "reason": "StorageUnavailableError"}
    assert registry.get_sample_value("ratewarden_degraded_total", labels) == 1
    names = {
        name
        for family in registry.collect()
        if family.name == "ratewarden_degraded"
        for sample in family.samples
        for name in sample.labels
    }
    assert names == {"rule", "failure_mode", "reason"}


def test_a_metrics_subclass_still_taking_mode_is_adapted_with_a_warning(
    dead: RedisStore,
) -> None:
    """``degraded(self, *, rule, mode, reason)``, the old signature: the class statement warns
    (naming the new keyword), and the limiter's degraded decisions still reach it as ``mode``."""
    with pytest.warns(DeprecationWarning, match="its keyword is failure_mode now") as caught:

        class Old(Metrics):
            def __init__(self) -> None:
                self.calls: list[tuple[str, str, str]] = []

            def degraded(self, *, rule: str, mode: str, reason: str) -> None:
                self.calls.append((rule, mode, reason))

    assert caught[0].filename == __file__
    old = Old()
    Limiter(dead, failure_mode="closed", metrics=old, name="api").hit("k", RATE)
    assert old.calls == [("api", "closed", "StorageUnavailableError")]


def test_a_metrics_subclass_taking_keywords_is_left_alone() -> None:
    """A ``degraded(**labels)`` or one already taking ``failure_mode`` is not wrapped and
    warns nothing: it is called with ``failure_mode=`` as is."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Loose(Metrics):
            def degraded(self, **labels: str) -> None:  # type: ignore[override]
                self.labels = labels

        class New(Metrics):
            def degraded(self, *, rule: str, failure_mode: str, reason: str) -> None:
                pass

    assert not hasattr(Loose.__dict__["degraded"], "__wrapped__")
    assert not hasattr(New.__dict__["degraded"], "__wrapped__")
    loose = Loose()
    loose.degraded(rule="r", failure_mode="open", reason="x")
    assert loose.labels == {"rule": "r", "failure_mode": "open", "reason": "x"}


def test_a_plain_limiter_still_raises_the_stores_error(dead: RedisStore) -> None:
    """A plain limiter's hit (every part off): neither name given means no failure mode, and
    the store's error is raised, as before."""
    limiter = Limiter(dead)
    assert limiter.plain and limiter.failure_mode is None
    with pytest.raises(StorageUnavailableError):
        limiter.hit("k", RATE)

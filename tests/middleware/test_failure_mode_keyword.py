"""The middlewares take ``failure_mode=``; ``failure=`` still works for one release, warning.

Every middleware with a failure mode (the rate limit twins, the concurrency twins and
``SlotPolicy``, the token budget middleware) built with the old keyword warns once,
naming ``failure_mode=`` and the line that built it, and behaves as with the new one:
against a real redis-server address nobody listens on, ``closed`` answers 503.
"""

from __future__ import annotations

import inspect
import json
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from flask import Flask

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore
from ratewarden.budgets import AsyncTokenBudget, TokenBudget
from ratewarden.errors import ConfigurationError
from ratewarden.middleware import RateLimitMiddleware, Rule, RuleSet, WSGIRateLimitMiddleware
from ratewarden.middleware.budget import TokenBudgetMiddleware, WSGITokenBudgetMiddleware
from ratewarden.middleware.concurrency import (
    ConcurrencyMiddleware,
    SlotPolicy,
    WSGIConcurrencyMiddleware,
)
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, STORE_TIMEOUT, free_port

pytestmark = pytest.mark.timeout(30)


async def app(scope: Any, receive: Any, send: Any) -> None:
    """Never reached in these tests: they build middlewares and read their settings."""


def wsgi_app(environ: Any, start_response: Any) -> list[bytes]:
    return []


def _rules() -> RuleSet:
    return RuleSet([Rule("per-ip", "5/minute")], clock=ManualClock())


def _budget() -> AsyncTokenBudget:
    store = AsyncMemoryStore(clock=ManualClock())
    return AsyncTokenBudget(store, {"tokens": "1000/minute"}, max_output_tokens=10)


def _blocking_budget() -> TokenBudget:
    store = MemoryStore(clock=ManualClock())
    return TokenBudget(store, {"tokens": "1000/minute"}, max_output_tokens=10)


#: Each middleware built with ``**options`` added, and how to read its failure mode back.
BUILDERS: dict[str, tuple[Callable[..., Any], Callable[[Any], str]]] = {
    "RateLimitMiddleware": (
        lambda **o: RateLimitMiddleware(app, limiter=AsyncLimiter(), rules=_rules(), **o),
        lambda m: m.failure_answer.failure_mode,
    ),
    "WSGIRateLimitMiddleware": (
        lambda **o: WSGIRateLimitMiddleware(wsgi_app, limiter=Limiter(), rules=_rules(), **o),
        lambda m: m.failure_answer.failure_mode,
    ),
    "ConcurrencyMiddleware": (
        lambda **o: ConcurrencyMiddleware(app, limiter=AsyncLimiter(), limit=1, **o),
        lambda m: m.policy.failure_answer.failure_mode,
    ),
    "WSGIConcurrencyMiddleware": (
        lambda **o: WSGIConcurrencyMiddleware(wsgi_app, limiter=Limiter(), limit=1, **o),
        lambda m: m.policy.failure_answer.failure_mode,
    ),
    "SlotPolicy": (
        lambda **o: SlotPolicy(limit=1, **o),
        lambda m: m.failure_answer.failure_mode,
    ),
    "TokenBudgetMiddleware": (
        lambda **o: TokenBudgetMiddleware(app, budget=_budget(), estimate=lambda r, b: 1, **o),
        lambda m: m.failure_answer.failure_mode,
    ),
    "WSGITokenBudgetMiddleware": (
        lambda **o: WSGITokenBudgetMiddleware(
            wsgi_app, budget=_blocking_budget(), estimate=lambda r, b: 1, **o
        ),
        lambda m: m.failure_answer.failure_mode,
    ),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_old_keyword_warns_once_at_the_building_line(name: str) -> None:
    """``failure="closed"``: one DeprecationWarning, ``<Class>(failure=...) is deprecated; use
    failure_mode=``, attributed to this file; the middleware's failure mode is ``closed``."""
    build, failure_mode = BUILDERS[name]
    with pytest.warns(DeprecationWarning) as caught:
        middleware = build(failure="closed")
    assert [str(w.message) for w in caught] == [
        f"{name}(failure=...) is deprecated; use failure_mode="
    ]
    assert caught[0].filename == __file__
    assert failure_mode(middleware) == "closed"


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_new_keyword_warns_nothing_and_both_are_refused(name: str) -> None:
    """``failure_mode="closed"`` is taken silently; the old and the new name together are a
    ConfigurationError; a bad value names ``failure_mode``."""
    build, failure_mode = BUILDERS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert failure_mode(build(failure_mode="closed")) == "closed"
        assert failure_mode(build()) == "open"
    with pytest.raises(ConfigurationError, match="give failure_mode= only"):
        build(failure="open", failure_mode="closed")
    with pytest.raises(ConfigurationError, match="failure_mode 'shut' must be one of open"):
        build(failure_mode="shut")


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_old_keyword_beside_failure_mode_open_is_refused_too(name: str) -> None:
    """``failure="closed", failure_mode="open"`` was taken as closed (with the warning only):
    ``open`` was the default, so giving it could not be told from leaving it out. Both names
    given are refused whatever the new one says; the signature still reads ``'open'``."""
    build, _ = BUILDERS[name]
    with pytest.raises(ConfigurationError, match="give failure_mode= only") as caught:
        build(failure="closed", failure_mode="open")
    assert "(got failure='closed' and failure_mode='open')" in str(caught.value)


def test_the_default_reads_open_in_the_signatures() -> None:
    """The default that tells 'open' given from 'open' left out still reads 'open' in help()."""
    for built in (
        RateLimitMiddleware,
        SlotPolicy,
        TokenBudgetMiddleware,
    ):
        parameter = inspect.signature(built).parameters["failure_mode"]
        assert repr(parameter.default) == "'open'"


def test_the_old_keyword_still_answers_a_dead_store_with_503() -> None:
    """Flask behind ``WSGIRateLimitMiddleware(failure="closed")`` over a store that cannot be
    reached: 503 with Retry-After, as ``failure_mode="closed"`` answers."""
    store = RedisStore.from_url(f"redis://{HOST}:{free_port()}/0", timeout=STORE_TIMEOUT)
    flask = Flask(__name__)
    flask.add_url_rule("/", "home", lambda: "home")
    try:
        with pytest.warns(DeprecationWarning, match="use failure_mode="):
            flask.wsgi_app = WSGIRateLimitMiddleware(  # type: ignore[method-assign]
                flask.wsgi_app, limiter=Limiter(store), rules=_rules(), failure="closed"
            )
        response = flask.test_client().get("/")
    finally:
        store.close()
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert json.loads(response.get_data())["status"] == 503

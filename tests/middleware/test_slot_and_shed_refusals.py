"""The concurrency middlewares refuse a limiter of the other kind and a missing or unbounded
option when built; the shedding middleware's classify bugs are logged once a minute per kind.

Before, ``ConcurrencyMiddleware`` took a blocking ``Limiter`` (every request then a 500:
``object Lease can't be used in 'await' expression``) and ``WSGIConcurrencyMiddleware`` an
``AsyncLimiter`` (``'coroutine' object has no attribute 'allowed'``); a missing ``limit`` was
Python's TypeError; ``ttl=1e12`` was refused as not "more than 0"; and after one classify
bug's line, a different bug was silent for the rest of the minute.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore
from ratewarden.budgets import LoadShedder
from ratewarden.errors import ConfigurationError
from ratewarden.middleware import (
    ConcurrencyMiddleware,
    WSGIConcurrencyMiddleware,
    WSGISheddingMiddleware,
)
from ratewarden.testing import ManualClock


async def _ok(request: Any) -> PlainTextResponse:
    return PlainTextResponse("ok")


def test_starlette_refuses_a_blocking_limiter_naming_the_twin() -> None:
    """Starlette builds its middleware at the first request: a ConfigurationError saying an
    AsyncLimiter goes here and the Limiter with WSGIConcurrencyMiddleware; no 500."""
    app = Starlette(routes=[Route("/w", _ok)])
    app.add_middleware(ConcurrencyMiddleware, limiter=Limiter(MemoryStore()), limit=2)
    with (
        pytest.raises(
            ConfigurationError,
            match=r"^ConcurrencyMiddleware limiter=.*: an AsyncLimiter \(a Limiter blocks: it "
            r"goes with WSGIConcurrencyMiddleware, on WSGI\)$",
        ),
        TestClient(app) as client,
    ):
        client.get("/w")


def test_flask_refuses_an_asyncio_limiter_naming_the_twin() -> None:
    """WSGIConcurrencyMiddleware given an AsyncLimiter: refused when built."""
    app = Flask(__name__)
    with pytest.raises(
        ConfigurationError,
        match=r"^WSGIConcurrencyMiddleware limiter=.*: a Limiter \(an AsyncLimiter goes with "
        r"ConcurrencyMiddleware, on ASGI\)$",
    ):
        WSGIConcurrencyMiddleware(app.wsgi_app, limiter=AsyncLimiter(AsyncMemoryStore()), limit=2)


@pytest.mark.parametrize(
    ("middleware", "limiter"),
    [(ConcurrencyMiddleware, AsyncLimiter), (WSGIConcurrencyMiddleware, Limiter)],
)
def test_the_right_kind_is_taken(middleware: Any, limiter: Any) -> None:
    """Each twin still takes its own kind."""
    store = AsyncMemoryStore() if limiter is AsyncLimiter else MemoryStore()
    assert middleware(lambda *a: None, limiter=limiter(store), limit=2).policy.limit == 2


@pytest.mark.parametrize("middleware", [ConcurrencyMiddleware, WSGIConcurrencyMiddleware])
def test_a_missing_limit_is_a_configuration_error(middleware: Any) -> None:
    """Not ``SlotPolicy.__init__() missing 1 required keyword-only argument``: the option and
    what it means."""
    limiter = AsyncLimiter() if middleware is ConcurrencyMiddleware else Limiter()
    with pytest.raises(ConfigurationError, match=r"limit= is required: the most requests"):
        middleware(lambda *a: None, limiter=limiter)


def test_a_ttl_over_365_days_is_refused_with_the_bound() -> None:
    """ttl=1e12 is more than 0: the message names the real rule, at most 365 days."""
    with pytest.raises(
        ConfigurationError,
        match=r"ttl=1000000000000.0: seconds, at least 0.001 .* at most 365 days",
    ):
        WSGIConcurrencyMiddleware(lambda *a: None, limiter=Limiter(), limit=2, ttl=1e12)
    assert WSGIConcurrencyMiddleware(
        lambda *a: None, limiter=Limiter(), limit=2, ttl=86_400 * 365 - 1
    )


def test_one_classify_bug_does_not_hide_another(caplog: pytest.LogCaptureFixture) -> None:
    """Flask, a classify that returns a misspelt class or raises as the request says, one
    clock: within one minute the first of each kind is logged (a name the policy lacks, then
    a KeyError), the same kinds again are not (another misspelling included); a minute
    later, again. Every request is classed normal and admitted."""
    clock = ManualClock()

    def classify(request: Any) -> str:
        value = request.headers.get("x-priority", "")
        if value == "boom":
            raise KeyError("x-tier")
        return value

    app = Flask(__name__)
    app.get("/")(lambda: "ok")
    app.wsgi_app = WSGISheddingMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, shedder=LoadShedder(lambda: 0.1), classify=classify, clock=clock
    )
    client = app.test_client()
    with caplog.at_level(logging.ERROR, logger="ratewarden.middleware"):
        for value in ("critcal", "boom", "critcal", "hgih", "boom"):
            assert client.get("/", headers={"x-priority": value}).status_code == 200
        clock.advance(60)
        assert client.get("/", headers={"x-priority": "boom"}).status_code == 200
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3, lines
    assert "classify returned 'critcal', not a class of the shed policy" in lines[0]
    assert "classify raised KeyError" in lines[1] and "classify raised KeyError" in lines[2]
    assert all("classed 'normal'" in line for line in lines)


@pytest.mark.parametrize("ttl", [0.0005, 1e-9])
def test_a_ttl_under_a_millisecond_is_refused_when_built(ttl: float) -> None:
    """The limiter refuses a slot lease under 1 ms; the middleware says so when it is built,
    not at each request (as a ConfigurationError from every acquire)."""
    with pytest.raises(ConfigurationError, match=r"at least 0\.001 \(1 ms"):
        WSGIConcurrencyMiddleware(lambda *a: None, limiter=Limiter(), limit=2, ttl=ttl)
    assert WSGIConcurrencyMiddleware(lambda *a: None, limiter=Limiter(), limit=2, ttl=0.001)

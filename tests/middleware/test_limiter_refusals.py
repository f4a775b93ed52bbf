"""A rate limit middleware refuses, when it is built, what is no limiter for it.

A blocking ``Limiter`` under the ASGI middleware, an ``AsyncLimiter`` under the WSGI one, a
limiter class for an instance, or a store for a limiter each used to fail on every request
(a raw TypeError, a never-awaited coroutine, an 'unknown algorithm' naming the key). Now each is
a ConfigurationError naming the keyword (or the Django setting) and what to give."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from django.http import HttpRequest, HttpResponse
from django.test import override_settings
from fastapi import FastAPI

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, Rate
from ratewarden.decision import Decision
from ratewarden.hotkeys import AsyncCellLimiter, AsyncHotKeyLimiter, CellLimiter, HotKeyLimiter
from ratewarden.middleware import RateLimitMiddleware, Rule, RuleSet, WSGIRateLimitMiddleware
from ratewarden.middleware.django import DjangoRateLimitMiddleware
from ratewarden.storage.memory import MemoryStore
from ratewarden.tiers import AsyncTwoTier, TwoTier
from tests.middleware._helpers import ok

RULES = RuleSet([Rule("per-ip", "5/minute")])

ASYNC_WANTED = "give an AsyncLimiter or AsyncTwoTier"
SYNC_WANTED = "give a Limiter or TwoTier"


def wsgi_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


@pytest.mark.parametrize(
    ("limiter", "says"),
    [
        (Limiter(MemoryStore()), "has a hit that blocks, and this middleware awaits it"),
        (TwoTier(MemoryStore()), "has a hit that blocks"),
        (AsyncLimiter, "is the class AsyncLimiter, not a limiter"),
        (AsyncMemoryStore(), "is an AsyncMemoryStore, a store, not a limiter"),
        (object(), "has no hit(key, rates, cost) method"),
    ],
)
def test_the_asgi_middleware_refuses_what_is_no_async_limiter(limiter: object, says: str) -> None:
    """RateLimitMiddleware names itself, the keyword and what to give instead."""
    with pytest.raises(ConfigurationError) as caught:
        RateLimitMiddleware(ok, limiter=limiter, rules=RULES)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith("RateLimitMiddleware limiter=")
    assert says in message and ASYNC_WANTED in message


@pytest.mark.parametrize(
    ("limiter", "says"),
    [
        (AsyncLimiter(AsyncMemoryStore()), "has a hit that is awaited, and this middleware calls"),
        (AsyncTwoTier(AsyncMemoryStore()), "has a hit that is awaited"),
        (Limiter, "is the class Limiter, not a limiter"),
        (MemoryStore(), "is a MemoryStore, a store, not a limiter"),
    ],
)
def test_the_wsgi_middleware_refuses_what_is_no_blocking_limiter(
    limiter: object, says: str
) -> None:
    """WSGIRateLimitMiddleware, as the ASGI one, with the blocking limiters to give."""
    with pytest.raises(ConfigurationError) as caught:
        WSGIRateLimitMiddleware(wsgi_app, limiter=limiter, rules=RULES)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith("WSGIRateLimitMiddleware limiter=")
    assert says in message and SYNC_WANTED in message


async def test_fastapi_add_middleware_refuses_a_blocking_limiter_before_any_request_runs() -> None:
    """The quickstart's first limiter in a FastAPI app: Starlette builds the middleware at
    the first request, which gets the refusal instead of a TypeError from inside a hit."""
    app = FastAPI()
    reached: list[str] = []

    @app.get("/")
    async def home() -> str:
        reached.append("home")
        return "home"

    app.add_middleware(RateLimitMiddleware, limiter=Limiter(MemoryStore()), rules=RULES)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        with pytest.raises(ConfigurationError, match="RateLimitMiddleware limiter=Limiter"):
            await client.get("/")
    assert reached == []


class OwnAsyncLimiter:
    """A limiter of the caller's, with an asyncio hit."""

    async def hit(
        self, key: str, rates: Sequence[Rate], cost: int = 1, *, shadow: bool = False
    ) -> Decision:
        raise AssertionError("not called")


class OwnWrapper:
    """A caller's wrapper whose plain hit hands back an asyncio limiter's awaitable."""

    def __init__(self) -> None:
        self.inner = AsyncLimiter(AsyncMemoryStore())

    def hit(self, key: str, rates: Sequence[Rate], cost: int = 1, *, shadow: bool = False) -> Any:
        return self.inner.hit(key, rates, cost, shadow=shadow)


def test_the_limiters_the_docs_allow_are_taken() -> None:
    """AsyncLimiter, AsyncTwoTier, AsyncHotKeyLimiter and a caller's own (an async hit, or a
    wrapper handing back awaitables) under ASGI; Limiter, TwoTier, HotKeyLimiter under WSGI."""
    async_store, store = AsyncMemoryStore(), MemoryStore()
    for limiter in (
        AsyncLimiter(async_store),
        AsyncTwoTier(async_store),
        AsyncHotKeyLimiter(async_store, AsyncCellLimiter(async_store, cells=2)),
        OwnAsyncLimiter(),
        OwnWrapper(),
    ):
        assert RateLimitMiddleware(ok, limiter=limiter, rules=RULES).limiter is limiter  # type: ignore[arg-type]
    for blocking in (
        Limiter(store),
        TwoTier(store),
        HotKeyLimiter(store, CellLimiter(store, cells=2)),
    ):
        assert WSGIRateLimitMiddleware(wsgi_app, limiter=blocking, rules=RULES).limiter is blocking  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("limiter", "says"),
    [
        ("ratewarden.Limiter", "which is the class Limiter, not a limiter: give a Limiter"),
        (MemoryStore(), "which is a MemoryStore, a store, not a limiter: give a Limiter"),
    ],
)
def test_django_refuses_a_limiter_class_or_a_store_by_the_setting(
    limiter: object, says: str
) -> None:
    """A dotted path to the class (not an instance) or a store in RATEWARDEN_MIDDLEWARE: the
    setting's key is named, when Django builds the middleware."""
    with (
        override_settings(RATEWARDEN_MIDDLEWARE={"limiter": limiter, "rules": RULES}),
        pytest.raises(ConfigurationError) as caught,
    ):
        DjangoRateLimitMiddleware(lambda request: HttpResponse("never"))
    message = str(caught.value)
    assert message.startswith("RATEWARDEN_MIDDLEWARE['limiter'] is ")
    assert says in message


def test_django_in_async_mode_names_the_async_limiters_for_a_store() -> None:
    """In async mode a store is refused with the limiters that mode awaits."""

    async def awaited(request: HttpRequest) -> HttpResponse:
        return HttpResponse("never")

    with (
        override_settings(RATEWARDEN_MIDDLEWARE={"limiter": AsyncMemoryStore(), "rules": RULES}),
        pytest.raises(ConfigurationError, match="a store, not a limiter: " + ASYNC_WANTED),
    ):
        DjangoRateLimitMiddleware(awaited)


def test_a_url_given_as_the_limiter_is_not_echoed() -> None:
    """A Redis URL given for the limiter is refused without its text (it may hold a password)."""
    with pytest.raises(ConfigurationError) as caught:
        RateLimitMiddleware(ok, limiter="redis://app:s3cret@10.0.0.5/0", rules=RULES)  # type: ignore[arg-type]
    assert "s3cret" not in str(caught.value)
    assert "limiter=a str has no hit" in str(caught.value)

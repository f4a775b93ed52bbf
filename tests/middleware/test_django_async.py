"""``DjangoRateLimitMiddleware`` in Django's async mode: under Django's own ``ASGIHandler``,
with async views, the limit is decided with an awaited limiter on the event loop.

Real Django: its ``ASGIHandler`` (and middleware chain) driven by httpx's ASGI transport, as a
server drives it. ``SignedInAsync`` stands in for Django's ``AuthenticationMiddleware`` in
async mode (which needs the auth and session apps and a database) the way it works: it sets
``request.auser``, and a lazy ``request.user`` whose evaluation, like the database query
behind the real one, Django refuses on the event loop (``async_unsafe``).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import pytest
import redis
from asgiref.sync import markcoroutinefunction
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client
from django.test.utils import override_settings
from django.urls import path
from django.utils.asyncio import async_unsafe
from django.utils.functional import SimpleLazyObject

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import (
    AsyncLimiter,
    AsyncMemoryStore,
    AsyncTwoTier,
    ConfigurationError,
    Decision,
    Limiter,
    MemoryStore,
    TwoTier,
)
from ratewarden.middleware import (
    Denied,
    Rule,
    RuleSet,
    by_client_ip,
    by_user,
    exempt,
    first_of,
    limit,
    override,
)
from ratewarden.middleware._types import Message
from ratewarden.middleware.django import django_user
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, RedisServer, SilentServer
from tests.middleware._helpers import http_scope
from tests.middleware.test_django_middleware import User

PEER = "198.51.100.4"
RATE_LIMITER = "ratewarden.middleware.django.DjangoRateLimitMiddleware"
MIDDLEWARE = [f"{__name__}.SignedInAsync", RATE_LIMITER]

AsyncView = Callable[[HttpRequest], Coroutine[Any, Any, HttpResponse]]


class SignedInAsync:
    """``request.auser()`` finds the user named by ``X-Test-User`` (else an anonymous one);
    ``request.user`` is that user behind a lazy object Django refuses to evaluate on the
    event loop, as ``AuthenticationMiddleware`` leaves it."""

    sync_capable = False
    async_capable = True

    def __init__(self, get_response: AsyncView) -> None:
        self.get_response = get_response
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        header = request.headers.get("X-Test-User")
        user = User(int(header) if header else None)

        async def auser() -> User:
            return user

        request.user = SimpleLazyObject(async_unsafe(lambda: user))  # type: ignore[attr-defined]
        request.auser = auser  # type: ignore[attr-defined]
        return await self.get_response(request)


class SyncOnly:
    """A synchronous-only middleware: listed after the rate limiter, it puts it in sync mode."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)


async def notes(request: HttpRequest) -> HttpResponse:
    user = getattr(request, "auser", None)
    found = (await user()).pk if user is not None else None
    response = JsonResponse({"user": found})
    response["X-App"] = "1"
    return response


@limit(
    "1/minute",
    name="django-async-search",
    denied=Denied({"error": "one search a minute"}, headers={"X-Why": "search"}),
)
async def search(request: HttpRequest) -> HttpResponse:
    return HttpResponse("results")


@exempt()
async def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@override("per-user", cost=2)
async def upload(request: HttpRequest) -> HttpResponse:
    return HttpResponse("stored")


urlpatterns = [
    path("notes", notes),
    path("search", search),
    path("health", health),
    path("upload", upload),
]


def _rules(clock: ManualClock) -> RuleSet:
    """Two requests a minute per signed-in user, else per address."""
    key = first_of(by_user(django_user), by_client_ip())
    return RuleSet([Rule("per-user", "2/minute", key=key)], clock=clock)


def _settings(middleware: list[str] = MIDDLEWARE, **options: Any) -> override_settings:
    """The stack above with ``options`` as the middleware's setting (Django builds the chain
    when a handler is made, from the settings in force)."""
    return override_settings(
        ROOT_URLCONF=__name__, MIDDLEWARE=middleware, RATEWARDEN_MIDDLEWARE=options
    )


def _client(handler: ASGIHandler, peer: str = PEER) -> httpx.AsyncClient:
    """A client on Django's ASGI handler whose requests come from ``peer``."""
    transport = httpx.ASGITransport(app=handler, client=(peer, 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def _threads() -> tuple[list[int], Callable[[str, str, Decision], None]]:
    """The threads decisions are made in, and the limiter's ``on_decision`` that notes them."""
    seen: list[int] = []
    return seen, lambda algorithm, key, decision: seen.append(threading.get_ident())


@pytest.mark.parametrize(
    "signing_in",
    [f"{__name__}.SignedInAsync", "tests.middleware.test_django_middleware.SignedIn"],
    ids=["auser", "plain-request-user"],
)
async def test_each_signed_in_user_has_a_budget_of_their_own(signing_in: str) -> None:
    """by_user(django_user) counts the user Django's stack signed in, decided on the event
    loop's thread: with ``auser`` (AuthenticationMiddleware's; the lazy ``request.user`` is
    never evaluated there), or a plain ``request.user`` set by a middleware of one's own."""
    clock = ManualClock()
    seen, noted = _threads()
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock), on_decision=noted)
    alice, bob = {"X-Test-User": "7"}, {"X-Test-User": "8"}
    with _settings([signing_in, RATE_LIMITER], limiter=limiter, rules=_rules(clock)):
        async with _client(ASGIHandler()) as client:
            first = await client.get("/notes", headers=alice)
            second = await client.get("/notes", headers=alice)
            denied = await client.get("/notes", headers=alice)
            other = await client.get("/notes", headers=bob)
            clock.advance(30)  # GCRA: one request back every 30 s
            again = await client.get("/notes", headers=alice)
    assert first.status_code == second.status_code == 200
    # The view reads the user with its own auser(), where there is one.
    assert first.json() == {"user": 7 if signing_in.endswith("Async") else None}
    assert first.headers["X-App"] == "1" and '"per-user"' in first.headers["RateLimit-Policy"]
    assert denied.status_code == 429 and json.loads(denied.content)["policy"] == "per-user"
    assert denied.headers["Retry-After"] == "30" and "X-App" not in denied.headers
    assert other.status_code == 200 and again.status_code == 200
    assert seen == [threading.get_ident()] * 5


async def test_anonymous_requests_fall_back_to_the_address() -> None:
    """Nobody signed in: each client address has the two requests a minute."""
    clock = ManualClock()
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    with _settings(limiter=limiter, rules=_rules(clock)):
        handler = ASGIHandler()
        async with _client(handler) as here, _client(handler, "198.51.100.5") as there:
            statuses = [(await here.get("/notes")).status_code for _ in range(3)]
            elsewhere = await there.get("/notes")
    assert statuses == [200, 200, 429]
    assert elsewhere.status_code == 200 and elsewhere.json() == {"user": None}


async def _sent(handler: ASGIHandler, method: str) -> tuple[int, dict[str, str], bytes]:
    """``method /notes`` straight into the handler (no client to drop a HEAD's body): the
    status, headers and every body byte it sends."""
    sent: list[Message] = []
    asked: list[bool] = []
    done = asyncio.Event()

    async def receive() -> Message:
        if not asked:  # the request: no body
            asked.append(True)
            return {"type": "http.request"}
        await done.wait()  # then the client goes once the response ended
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    scope = http_scope(method, "/notes", [(b"host", b"testserver")], client=(PEER, 1234),
                       server=("testserver", 80))  # fmt: skip
    await handler(scope, receive, send)
    start = sent[0]
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


async def test_a_denied_head_gets_the_headers_and_no_body() -> None:
    """HEAD over the limit: the GET denial's status and headers, Content-Length included,
    and not one byte of body sent."""
    clock = ManualClock()
    with _settings(limiter=AsyncLimiter(AsyncMemoryStore(clock=clock)), rules=_rules(clock)):
        handler = ASGIHandler()
        for _ in range(2):
            assert (await _sent(handler, "HEAD"))[0] == 200
        status, head, body = await _sent(handler, "HEAD")
        denied_status, denied, denied_body = await _sent(handler, "GET")
    assert status == denied_status == 429 and body == b"" and denied_body != b""
    assert head["content-length"] == denied["content-length"] == str(len(denied_body))
    assert head["ratelimit"] == denied["ratelimit"]


async def test_route_decorators_and_a_rule_s_own_denial() -> None:
    """@limit (with its own denied= answer), @exempt and @override on async views, found with
    django_endpoint."""
    clock = ManualClock()
    with _settings(limiter=AsyncLimiter(AsyncMemoryStore(clock=clock)), rules=_rules(clock)):
        async with _client(ASGIHandler()) as client:
            searched = await client.get("/search", headers={"X-Test-User": "1"})
            refused = await client.get("/search", headers={"X-Test-User": "2"})
            healthy = [await client.get("/health") for _ in range(4)]
            stored = await client.post("/upload", headers={"X-Test-User": "3"})
            full = await client.post("/upload", headers={"X-Test-User": "3"})
    assert searched.status_code == 200 and searched.text == "results"
    assert refused.status_code == 429 and refused.json() == {"error": "one search a minute"}
    assert refused.headers["X-Why"] == "search"
    assert '"django-async-search"' in refused.headers["RateLimit"]
    assert [r.status_code for r in healthy] == [200] * 4
    assert all("RateLimit" not in r.headers for r in healthy)
    assert stored.status_code == 200 and full.status_code == 429  # each upload costs 2 of 2
    assert '"per-user"' in full.headers["RateLimit"]


@pytest.mark.parametrize("mode", ["closed", "open"])
async def test_a_store_that_does_not_answer_gets_the_failure_mode_s_answer(
    silent_server: SilentServer, mode: str
) -> None:
    """A Redis that accepts and never answers: closed answers 503 without calling the view,
    open lets the request through with no RateLimit headers."""
    store = AsyncRedisStore.from_url(f"redis://{HOST}:{silent_server.port}", timeout=0.05)
    # per-user too: the urlconf's /upload overrides it, and the rule set checks every route.
    rules = RuleSet([Rule("per-ip", "5/minute"), Rule("per-user", "5/minute")])
    try:
        with _settings(limiter=AsyncLimiter(store), rules=rules, failure_mode=mode):
            async with _client(ASGIHandler()) as client:
                answered = await client.get("/notes")
    finally:
        await store.aclose()
    if mode == "closed":
        assert answered.status_code == 503 and "Retry-After" in answered.headers
        assert json.loads(answered.content)["status"] == 503
        assert "X-App" not in answered.headers
    else:
        assert answered.status_code == 200 and answered.headers["X-App"] == "1"
        assert "RateLimit" not in answered.headers


@pytest.mark.redis
async def test_on_a_real_redis_each_hit_is_awaited_on_the_event_loop(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """An AsyncLimiter on a real redis-server: each user's budget is counted there, every
    decision awaited in the event loop's thread."""
    clock = ManualClock()
    seen, noted = _threads()
    store = AsyncRedisStore.from_url(redis_server.url, clock=clock, timeout=2.0)
    alice = {"X-Test-User": "7"}
    try:
        with _settings(limiter=AsyncLimiter(store, on_decision=noted), rules=_rules(clock)):
            async with _client(ASGIHandler()) as client:
                statuses = [(await client.get("/notes", headers=alice)).status_code for _ in "abc"]
                other = await client.get("/notes", headers={"X-Test-User": "8"})
    finally:
        await store.aclose()
    assert statuses == [200, 200, 429] and other.status_code == 200
    assert seen == [threading.get_ident()] * 4
    assert redis_client.keys("*per-user:user:7*")


@pytest.mark.parametrize("kind", [AsyncLimiter, AsyncTwoTier])
async def test_both_awaited_limiters_fit_async_mode(kind: type[AsyncLimiter]) -> None:
    """AsyncLimiter and AsyncTwoTier are taken in async mode, and limit."""
    clock = ManualClock()
    with _settings(limiter=kind(AsyncMemoryStore(clock=clock)), rules=_rules(clock)):
        async with _client(ASGIHandler()) as client:
            statuses = [(await client.get("/notes")).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


async def test_a_sync_only_middleware_after_it_puts_it_in_sync_mode() -> None:
    """Under ASGI, a synchronous-only middleware listed after it makes Django run it in sync
    mode (in a thread, as before): a blocking Limiter is taken there and limits."""
    clock = ManualClock()
    seen, noted = _threads()
    limiter = Limiter(MemoryStore(clock=clock), on_decision=noted)
    stack = [*MIDDLEWARE, f"{__name__}.SyncOnly"]
    with _settings(stack, limiter=limiter, rules=_rules(clock)):
        async with _client(ASGIHandler()) as client:
            statuses = [(await client.get("/notes")).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert len(seen) == 3 and threading.get_ident() not in seen


ASYNC_REFUSAL = (
    "RATEWARDEN_MIDDLEWARE['limiter'] is {limiter!r}, whose hit blocks, and Django runs "
    "DjangoRateLimitMiddleware in async mode here (the ASGI handler, with only async-capable "
    "middleware after it): use an AsyncLimiter or AsyncTwoTier (over an AsyncStore such as "
    "AsyncRedisStore), which it awaits on the event loop"
)
SYNC_REFUSAL = (
    "RATEWARDEN_MIDDLEWARE['limiter'] is {limiter!r}, whose hit is awaited, and Django runs "
    "DjangoRateLimitMiddleware in sync mode here (the WSGI handler, or a synchronous-only "
    "middleware listed after it): use a Limiter or TwoTier (over a Store such as RedisStore), "
    "or serve under ASGI with only async-capable middleware after it"
)


@pytest.mark.parametrize("kind", [Limiter, TwoTier])
def test_a_blocking_limiter_is_refused_in_async_mode(kind: type[Limiter]) -> None:
    """Django's ASGI handler refuses to build the chain: the message names the setting and
    the awaited limiters to use instead."""
    limiter = kind(MemoryStore())
    with (
        _settings(limiter=limiter, rules=_rules(ManualClock())),
        pytest.raises(ConfigurationError) as caught,
    ):
        ASGIHandler()
    assert str(caught.value) == ASYNC_REFUSAL.format(limiter=limiter)


@pytest.mark.parametrize("under", ["wsgi", "asgi-sync-only-after"])
@pytest.mark.parametrize("kind", [AsyncLimiter, AsyncTwoTier])
def test_an_awaited_limiter_is_refused_in_sync_mode(kind: type[AsyncLimiter], under: str) -> None:
    """In sync mode (Django's WSGI test handler, or ASGI with a synchronous-only middleware
    after it) an awaited limiter is refused, naming the setting and the blocking limiters."""
    limiter = kind(AsyncMemoryStore())
    stack = MIDDLEWARE if under == "wsgi" else [*MIDDLEWARE, f"{__name__}.SyncOnly"]
    with (
        _settings(stack, limiter=limiter, rules=_rules(ManualClock())),
        pytest.raises(ConfigurationError) as caught,
    ):
        if under == "wsgi":
            Client().get("/notes")
        else:
            ASGIHandler()
    assert str(caught.value) == SYNC_REFUSAL.format(limiter=limiter)

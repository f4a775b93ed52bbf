"""``DjangoTokenBudgetMiddleware``: token budgets inside Django's middleware stack, in sync mode
(Django's WSGI handler served by werkzeug's threaded server) and in async mode (Django's ASGI
handler served by uvicorn), over real sockets, on memory and on a real redis-server.

A request's estimate is reserved before the view and settled once after it: at once for a
response the view has built (so its headers tell the budget after the settlement), at a
stream's end with ``actual``, at the estimate when nothing says what was used.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.test import AsyncClient, Client
from django.test.utils import override_settings
from django.urls import path
from prometheus_client import CollectorRegistry

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncMemoryStore, MemoryStore
from ratewarden.budgets import AsyncTokenBudget, Reservation, Usage
from ratewarden.limiter import Flow
from ratewarden.metrics import PrometheusMetrics
from ratewarden.middleware import RequestInfo, by_api_key, by_user
from ratewarden.middleware.django import django_user
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import STORE_TIMEOUT, RedisServer
from tests.middleware._budget_apps import KEY, LIMITS, Recording, ask, estimate
from tests.middleware._django_raw import asgi_sent, wsgi_sent
from tests.middleware._shed_apps import BOUND, asgi_serving, eventually, wsgi_serving

pytestmark = pytest.mark.timeout(60)

BUDGET = "ratewarden.middleware.django_budget.DjangoTokenBudgetMiddleware"
SIGNED_IN = "tests.middleware.test_django_middleware.SignedIn"
SIGNED_IN_ASYNC = "tests.middleware.test_django_async.SignedInAsync"
#: The bodies the views read, in order.
BODIES: list[bytes] = []


class AsyncRecording(AsyncTokenBudget):
    """``Recording``'s asyncio twin: keeps the usage each settlement was asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settled: list[Usage] = []

    def settle_usage_flow(self, reservation: Reservation, actual: Usage) -> Flow[Any]:
        self.settled.append(actual)
        return (yield from super().settle_usage_flow(reservation, actual))


def _used(request: HttpRequest) -> int:
    asked = json.loads(request.body)
    BODIES.append(request.body)
    return int(asked["prompt_tokens"]) + int(asked["reply_tokens"])


def chat(request: HttpRequest) -> HttpResponse:
    """Reports what it used in ``x-tokens-used`` (unless ``?quiet``) and on the request."""
    used = _used(request) if request.body else 0
    request.tokens_used = used  # type: ignore[attr-defined]
    response = JsonResponse({"text": "..."})
    if "quiet" not in request.GET:
        response["x-tokens-used"] = str(used)
    return response


def stream(request: HttpRequest) -> StreamingHttpResponse:
    used = _used(request)

    def body() -> Iterator[bytes]:
        for _ in range(3):
            yield b"tok "
        request.tokens_used = used  # type: ignore[attr-defined]

    return StreamingHttpResponse(body())


def astream(request: HttpRequest) -> StreamingHttpResponse:
    used = _used(request)

    async def body() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"tok "
        request.tokens_used = used  # type: ignore[attr-defined]

    return StreamingHttpResponse(body())


def fails(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the view fails")


urlpatterns = [
    path("v1/chat", chat),
    path("v1/stream", stream),
    path("v1/astream", astream),
    path("v1/fails", fails),
]


def actual(request: RequestInfo, headers: Sequence[tuple[str, str]]) -> int | None:
    """What the view left on Django's request (``request.raw.request``)."""
    found = getattr(request.raw.request, "tokens_used", None)
    return found if isinstance(found, int) else None


def _settings(middleware: list[str] | None = None, **options: Any) -> override_settings:
    """Django with only the budget middleware (or ``middleware``), ``options`` as its setting:
    per API key, the body read, and ``estimate`` unless said otherwise."""
    options.setdefault("estimate", estimate)
    options.setdefault("key", by_api_key())
    options.setdefault("read_body", True)
    return override_settings(
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["*"],
        MIDDLEWARE=middleware or [BUDGET],
        DEBUG_PROPAGATE_EXCEPTIONS=False,
        RATEWARDEN_TOKEN_BUDGET=options,
    )


Made = Callable[[str], tuple[Any, Any]]


@pytest.fixture(autouse=True)
def no_bodies() -> None:
    """Each test starts with no body read."""
    BODIES.clear()


@pytest.fixture(params=["memory", "redis"])
def make_budget(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[Made]:
    """``make_budget(mode)``: 10,000 tokens/min (a recording budget of the mode, and its store)
    on memory or a real redis-server (emptied first), under a ManualClock."""
    closing: list[RedisStore] = []

    def make(mode: str) -> tuple[Any, Any]:
        clock = ManualClock()
        store: Any
        if request.param == "memory":
            store = MemoryStore(clock=clock) if mode == "sync" else AsyncMemoryStore(clock=clock)
        else:
            redis_server.client().flushall()
            kind: Any = RedisStore if mode == "sync" else AsyncRedisStore
            store = kind.from_url(redis_server.url, clock=clock, timeout=2.0)
            if mode == "sync":
                closing.append(store)
        budget = (Recording if mode == "sync" else AsyncRecording)(
            store, LIMITS, max_output_tokens=4000
        )
        return budget, store

    yield make
    for store in closing:
        store.close()


@contextmanager
def _served(mode: str, store: Any) -> Iterator[httpx.Client]:
    """A client of Django served in ``mode``: its WSGI handler on werkzeug, or its ASGI
    handler on uvicorn (an asyncio ``store`` closed on the server's loop)."""
    sync = mode == "sync"
    serving = wsgi_serving(WSGIHandler()) if sync else asgi_serving(ASGIHandler(), store)
    with serving as url, httpx.Client(base_url=url, timeout=BOUND) as client:
        yield client


def _tokens(response: httpx.Response) -> str:
    return response.headers["x-ratelimit-remaining-tokens"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_reserve_4000_settle_at_1500_leaves_8500(make_budget: Made, mode: str) -> None:
    """The worked example: 4,000 reserved, the response reports 1,500, and that very response
    says 8,500 left; the view got the body it was sent; one settlement, of 1,500."""
    budget, store = make_budget(mode)
    sent = json.dumps(ask(1000, 3000, 500)).encode()
    with _settings(budget=budget), _served(mode, store) as client:
        response = client.post("/v1/chat", content=sent, headers=KEY)
    assert response.status_code == 200 and [sent] == BODIES
    assert response.headers["x-tokens-used"] == "1500"
    assert (response.headers["x-ratelimit-limit-tokens"], _tokens(response)) == ("10000", "8500")
    assert response.headers["x-ratelimit-remaining-requests"] == "99"
    assert '"tokens";q=10000;w=60;qu="tokens"' in response.headers["RateLimit-Policy"]
    assert [u.amount("tokens") for u in budget.settled] == [1500]


@pytest.mark.parametrize(("mode", "path"), [("sync", "/v1/stream"), ("async", "/v1/astream")])
def test_a_stream_settles_with_actual_once_its_last_chunk_is_taken(
    make_budget: Made, mode: str, path: str
) -> None:
    """``actual`` reads what the stream left on the request at its end: the stream's headers
    are the reservation's (6,000 left), the settlement is of 500 once it has ended. A built
    response is settled before its headers: the next one says 9,400 left."""
    budget, store = make_budget(mode)
    with _settings(budget=budget, actual=actual), _served(mode, store) as client:
        streamed = client.post(path, json=ask(200, 3800, 300), headers=KEY)
        settled = eventually(lambda: [u.amount("tokens") for u in budget.settled], [500])
        after = client.post("/v1/chat?quiet", json=ask(100, 100, 0), headers=KEY)
    assert (streamed.status_code, streamed.content, _tokens(streamed)) == (200, b"tok " * 3, "6000")
    assert settled == [500]
    assert after.status_code == 200 and _tokens(after) == "9400"


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_without_a_report_or_after_a_failing_view_the_estimate_stands(mode: str) -> None:
    """No usage header and no ``actual``, or a view that raised (Django's 500): each request is
    settled once, at its estimate (1,500 for a request without a body), nothing refunded."""
    budget = _memory(mode)
    with _settings(budget=budget):
        if mode == "sync":
            client = Client(raise_request_exception=False)
            got = [client.get(p, headers=KEY) for p in ("/v1/chat?quiet", "/v1/fails")]
        else:
            aclient = AsyncClient(raise_request_exception=False)
            got = [await aclient.get(p, headers=KEY) for p in ("/v1/chat?quiet", "/v1/fails")]
    assert [r.status_code for r in got] == [200, 500]
    assert [r["x-ratelimit-remaining-tokens"] for r in got] == ["8500", "7000"]
    assert [u.amount("tokens") for u in budget.settled] == [1500, 1500]


def _memory(mode: str) -> Any:
    clock = ManualClock()
    if mode == "sync":
        return Recording(MemoryStore(clock=clock), LIMITS, max_output_tokens=4000)
    return AsyncRecording(AsyncMemoryStore(clock=clock), LIMITS, max_output_tokens=4000)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_view_error_django_propagates_settles_at_the_estimate(mode: str) -> None:
    """With ``DEBUG_PROPAGATE_EXCEPTIONS`` the view's error passes through the middleware,
    which settles at the estimate on its way out."""
    budget = _memory(mode)
    with (
        _settings(budget=budget),
        override_settings(DEBUG_PROPAGATE_EXCEPTIONS=True),
        pytest.raises(RuntimeError, match="the view fails"),
    ):
        if mode == "sync":
            Client().get("/v1/fails", headers=KEY)
        else:
            await AsyncClient().get("/v1/fails", headers=KEY)
    assert [u.amount("tokens") for u in budget.settled] == [1500]


async def _collected(done: Callable[[], bool]) -> None:
    """Collect garbage and let the event loop run its finalizers until ``done()``, for at
    most ``BOUND`` seconds."""
    for _ in range(int(BOUND / 0.01)):
        gc.collect()
        await asyncio.sleep(0.01)
        if done():
            return


@pytest.mark.parametrize(("mode", "path"), [("sync", "/v1/stream"), ("async", "/v1/astream")])
async def test_a_stream_closed_before_its_end_settles_at_the_estimate_once(
    mode: str, path: str
) -> None:
    """A stream closed after its first chunk (the client left): settled once, at the estimate,
    and ``actual`` never asked."""
    budget = _memory(mode)
    asked: list[object] = []

    def noting(request: RequestInfo, headers: Sequence[tuple[str, str]]) -> None:
        asked.append(headers)

    sent = ask(200, 3800, 300)
    with _settings(budget=budget, actual=noting):
        if mode == "sync":
            response = Client().post(path, sent, content_type="application/json", headers=KEY)
            assert next(iter(response.streaming_content)) == b"tok "
            response.close()
        else:
            aresponse = await AsyncClient().post(
                path, sent, content_type="application/json", headers=KEY
            )
            chunks = aresponse.streaming_content
            assert await anext(chunks) == b"tok "
            await chunks.aclose()
            # Django closes the wrapper it iterates, not the stream inside: the event loop
            # closes that once it is collected, as under a server whose client left.
            del chunks, aresponse
            await _collected(lambda: bool(budget.settled))
    assert [u.amount("tokens") for u in budget.settled] == [4000]
    assert asked == []


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_spent_budget_is_refused_before_the_view(mode: str) -> None:
    """A request that needs more than is left gets 429 with the provider-style headers and
    ``Retry-After``, and the view never runs; a HEAD straight into Django's handler gets the
    same headers and no body."""
    budget = _memory(mode)
    big = ask(5000, 4500, 0)  # 9,500 of the 10,000: 500 left, less than any request needs
    with _settings(budget=budget):
        if mode == "sync":
            client = Client()
            first = client.post("/v1/chat?quiet", big, content_type="application/json", headers=KEY)
            refused = client.post("/v1/chat", big, content_type="application/json", headers=KEY)
            head, get = wsgi_sent("HEAD", "/v1/chat", KEY), wsgi_sent("GET", "/v1/chat", KEY)
        else:
            aclient = AsyncClient()
            first = await aclient.post(
                "/v1/chat?quiet", big, content_type="application/json", headers=KEY
            )
            refused = await aclient.post(
                "/v1/chat", big, content_type="application/json", headers=KEY
            )
            head = await asgi_sent("HEAD", "/v1/chat", KEY)
            get = await asgi_sent("GET", "/v1/chat", KEY)
    assert first.status_code == 200 and len(BODIES) == 1
    assert (refused.status_code, refused["x-ratelimit-remaining-tokens"]) == (429, "500")
    assert int(refused["Retry-After"]) > 0
    assert refused["Content-Type"] == "application/problem+json"
    assert (head[0], get[0]) == (429, 429) and head[2] == b"" and get[2] != b""
    assert head[1]["content-length"] == get[1]["content-length"] == str(len(get[2]))


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_body_past_max_body_is_a_413_before_anything_is_reserved(mode: str) -> None:
    """``max_body`` 64 bytes: a longer body is answered 413 from its Content-Length; nothing is
    reserved and the view never runs."""
    budget = _memory(mode)
    sent = ask(1, 1, 0, padding="x" * 100)
    with _settings(budget=budget, max_body=64):
        if mode == "sync":
            response = Client().post("/v1/chat", sent, content_type="application/json", headers=KEY)
        else:
            response = await AsyncClient().post(
                "/v1/chat", sent, content_type="application/json", headers=KEY
            )
    assert response.status_code == 413 and BODIES == []
    assert budget.settled == []


async def test_a_body_without_a_length_past_max_body_is_a_413_once_read() -> None:
    """Async mode, a body of 100+ bytes sent without Content-Length (a chunked upload, which
    Django's ASGI handler reads whole): 413 once read; nothing reserved, the view never runs."""
    budget = _memory("async")
    sent = json.dumps(ask(1, 1, 0, padding="x" * 100)).encode()
    with _settings(budget=budget, max_body=64):
        status, _, _ = await asgi_sent("POST", "/v1/chat", KEY, body=sent)
    assert status == 413 and BODIES == [] and budget.settled == []


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_each_signed_in_user_has_a_budget_of_their_own(mode: str) -> None:
    """After a signing-in middleware, ``by_user(django_user)`` budgets the signed-in user: user
    7's second 6,000-token request is refused, user 8's first admitted. In async mode the user
    is found with ``request.auser()``: the lazy ``request.user`` is never evaluated."""
    budget = _memory(mode)
    big = ask(3000, 3000, 0)
    alice, bob = {"X-Test-User": "7"}, {"X-Test-User": "8"}
    options = {"budget": budget, "key": by_user(django_user)}
    order = (alice, alice, bob)
    if mode == "sync":
        with _settings([SIGNED_IN, BUDGET], **options):
            client = Client()
            codes = [
                client.post(
                    "/v1/chat?quiet", big, content_type="application/json", headers=who
                ).status_code
                for who in order
            ]
    else:
        with _settings([SIGNED_IN_ASYNC, BUDGET], **options):
            aclient = AsyncClient()
            codes = [
                (
                    await aclient.post(
                        "/v1/chat?quiet", big, content_type="application/json", headers=who
                    )
                ).status_code
                for who in order
            ]
    assert codes == [200, 429, 200]


@pytest.mark.redis
@pytest.mark.parametrize("failure_mode", ["open", "closed"])
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_stopped_redis_is_answered_by_the_failure_mode(
    stopped: str, failure_mode: str, mode: str
) -> None:
    """A budget on a stopped Redis: open runs the view with nothing reserved and no budget
    headers, closed answers 503 with ``Retry-After``; counted under the budget's name."""
    registry = CollectorRegistry()
    options = {"failure_mode": failure_mode, "metrics": PrometheusMetrics(registry)}
    if mode == "sync":
        store: Any = RedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
        with _settings(budget=Recording(store, LIMITS, max_output_tokens=4000), **options):
            response = Client().get("/v1/chat?quiet", headers=KEY)
        store.close()
    else:
        store = AsyncRedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
        with _settings(budget=AsyncRecording(store, LIMITS, max_output_tokens=4000), **options):
            response = await AsyncClient().get("/v1/chat?quiet", headers=KEY)
        await store.aclose()
    if failure_mode == "open":
        assert response.status_code == 200 and "x-ratelimit-remaining-tokens" not in response
    else:
        assert (response.status_code, response["Retry-After"]) == (503, "1")
    degraded = registry.get_sample_value(
        "ratewarden_degraded_total",
        {"rule": "budget", "failure_mode": failure_mode, "reason": "StorageUnavailableError"},
    )
    assert degraded == 1.0

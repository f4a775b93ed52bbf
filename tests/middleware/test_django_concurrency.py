"""``DjangoConcurrencyMiddleware``: concurrency slots inside Django's middleware stack, in sync
mode (Django's WSGI handler served by werkzeug's threaded server) and in async mode (Django's
ASGI handler served by uvicorn), over real sockets, on memory and on a real redis-server.

A slot is held while the view runs and, for a streaming response, until its last chunk; whose
slot, the refusal and the failure mode are ``SlotPolicy``'s. The views and their gates are the
Django shedding tests' (``tests/middleware/test_django_shedding.py``).
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.test import AsyncClient, Client
from django.test.utils import override_settings
from prometheus_client import CollectorRegistry

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore
from ratewarden.metrics import PrometheusMetrics
from ratewarden.middleware import by_user
from ratewarden.middleware.django import django_user
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import STORE_TIMEOUT
from tests.middleware import test_django_shedding as views
from tests.middleware._django_raw import asgi_sent, wsgi_sent
from tests.middleware._shed_apps import BOUND, asgi_serving, eventually, held, wsgi_serving
from tests.middleware.test_django_shedding import GATES, STEPS, TAKEN

pytestmark = pytest.mark.timeout(60)

CONCURRENCY = "ratewarden.middleware.django_concurrency.DjangoConcurrencyMiddleware"
URLS = "tests.middleware.test_django_shedding"
SIGNED_IN = "tests.middleware.test_django_middleware.SignedIn"
SIGNED_IN_ASYNC = "tests.middleware.test_django_async.SignedInAsync"

#: The views' gates start closed and are opened when a test ends; an asyncio store (memory,
#: or a real redis-server).
fresh_gates = views.fresh_gates


def _settings(middleware: list[str] | None = None, **options: Any) -> override_settings:
    """Django with only the concurrency middleware (or ``middleware``), ``options`` as its
    setting."""
    return override_settings(
        ROOT_URLCONF=URLS,
        ALLOWED_HOSTS=["*"],
        MIDDLEWARE=middleware or [CONCURRENCY],
        DEBUG_PROPAGATE_EXCEPTIONS=False,
        RATEWARDEN_CONCURRENCY=options,
    )


def _refused_while_one_is_held(url: str, stream: str) -> tuple[httpx.Response, int, int]:
    """One stream of ``stream`` held (1 slot of 1): the refusal of a second request, the status
    of a HEAD while it is held, and of a request once the stream has ended."""
    with httpx.Client(base_url=url, timeout=BOUND) as client:
        with held(client, 1, stream) as (chunks,):
            refused = client.get("/quick")
            head = client.head("/quick").status_code
            GATES[0].finish.open()
            assert b"".join(chunks) == b"last"
        after = eventually(lambda: client.get("/quick").status_code, 200)
    return refused, head, after


def _check_refusal(refused: httpx.Response) -> None:
    assert (refused.status_code, refused.headers["Retry-After"]) == (429, "1")
    assert refused.headers["Content-Type"] == "application/problem+json"
    problem = refused.json()
    assert (problem["policy"], problem["limit"]) == ("inflight", 1)


def test_sync_mode_holds_a_stream_s_slot_until_its_last_chunk(sync_limiter: Limiter) -> None:
    """Django's WSGI handler on werkzeug, a Limiter (memory or Redis), one slot per address:
    while a stream is open another request is refused with the problem document (a HEAD gets
    the refusal too); once the stream has ended, a request is admitted again."""
    with _settings(limiter=sync_limiter, limit=1), wsgi_serving(WSGIHandler()) as url:
        refused, head, after = _refused_while_one_is_held(url, "/hold")
    _check_refusal(refused)
    assert (head, after) == (429, 200)


def test_async_mode_holds_a_stream_s_slot_until_its_last_chunk(async_store: Any) -> None:
    """Django's ASGI handler on uvicorn, an AsyncLimiter (memory or Redis) awaited on the event
    loop: the same answers as in sync mode."""
    limiter = AsyncLimiter(async_store)
    with _settings(limiter=limiter, limit=1), asgi_serving(ASGIHandler(), async_store) as url:
        refused, head, after = _refused_while_one_is_held(url, "/ahold")
    _check_refusal(refused)
    assert (head, after) == (429, 200)


@pytest.mark.parametrize(("mode", "stream"), [("sync", "/hold"), ("async", "/ahold")])
def test_a_client_that_leaves_mid_stream_gives_its_slot_back(mode: str, stream: str) -> None:
    """A client that closes its connection before the stream's end: the slot goes back (the
    server closes the response, or Django stops taking chunks)."""
    limiter: Any = Limiter(MemoryStore()) if mode == "sync" else AsyncLimiter(AsyncMemoryStore())
    serving = wsgi_serving if mode == "sync" else asgi_serving
    with (
        _settings(limiter=limiter, limit=1),
        serving(WSGIHandler() if mode == "sync" else ASGIHandler()) as url,
        httpx.Client(base_url=url, timeout=BOUND) as client,
    ):
        with held(client, 1, stream):
            during = client.get("/quick").status_code
        GATES[0].finish.open()  # a sync stream's thread waits here before its write fails
        after = eventually(lambda: client.get("/quick").status_code, 200)
    assert (during, after) == (429, 200)


@pytest.mark.parametrize(("mode", "stream"), [("sync", "/steps"), ("async", "/asteps")])
def test_a_long_stream_renews_its_slot_as_it_streams(mode: str, stream: str) -> None:
    """Chunks taken 12 s apart (on a ManualClock) keep the slot (TTL 30 s) past 48 s; 31 s
    without one lose it, and a request is admitted while the stream is still open."""
    clock = ManualClock()
    if mode == "sync":
        limiter: Any = Limiter(MemoryStore(clock=clock))
    else:
        limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    serving = wsgi_serving if mode == "sync" else asgi_serving
    codes = []
    STEPS[0].open()  # werkzeug sends the headers with the first chunk
    with (
        _settings(limiter=limiter, limit=1, ttl=30, clock=clock),
        serving(WSGIHandler() if mode == "sync" else ASGIHandler()) as url,
        httpx.Client(base_url=url, timeout=BOUND) as client,
        client.stream("GET", stream) as response,
    ):
        chunks = response.iter_raw()  # kept: a dropped iterator closes the response
        assert next(chunks) == b"chunk"
        for i in range(1, 5):
            clock.advance(12)  # 48 s in all: past the 30 s TTL, renewed on each chunk
            STEPS[i].open()
            assert TAKEN[i].wait(BOUND)
            codes.append(client.get("/quick").status_code)
        clock.advance(31)  # a TTL without a chunk
        codes.append(client.get("/quick").status_code)
        STEPS[5].open()
    assert codes == [429, 429, 429, 429, 200]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_plain_response_or_a_failing_view_gives_the_slot_back(mode: str) -> None:
    """One slot: requests one after another are all admitted, also after a view that raised
    (Django's 500): the slot goes back once the view has returned."""
    limiter: Any = Limiter(MemoryStore()) if mode == "sync" else AsyncLimiter(AsyncMemoryStore())
    paths = ("/quick", "/fails", "/quick", "/quick")
    with _settings(limiter=limiter, limit=1):
        if mode == "sync":
            client = Client(raise_request_exception=False)
            codes = [client.get(p).status_code for p in paths]
        else:
            aclient = AsyncClient(raise_request_exception=False)
            codes = [(await aclient.get(p)).status_code for p in paths]
    assert codes == [200, 500, 200, 200]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_view_error_django_propagates_gives_the_slot_back(mode: str) -> None:
    """With ``DEBUG_PROPAGATE_EXCEPTIONS`` the view's error passes through the middleware, which
    gives the slot back on its way out: the next request is admitted."""
    limiter: Any = Limiter(MemoryStore()) if mode == "sync" else AsyncLimiter(AsyncMemoryStore())
    with (
        _settings(limiter=limiter, limit=1),
        override_settings(DEBUG_PROPAGATE_EXCEPTIONS=True),
        pytest.raises(RuntimeError, match="the view fails"),
    ):
        if mode == "sync":
            Client().get("/fails")
        else:
            await AsyncClient().get("/fails")
    with _settings(limiter=limiter, limit=1):
        if mode == "sync":
            after = Client().get("/quick").status_code
        else:
            after = (await AsyncClient().get("/quick")).status_code
    assert after == 200


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_refused_head_gets_the_refusal_s_headers_and_no_body(mode: str) -> None:
    """Straight into Django's handler (no client or server to drop a body): with the one slot
    taken, a HEAD gets the GET refusal's status and headers, Content-Length included, and not
    one byte of body."""
    if mode == "sync":
        limiter: Any = Limiter(MemoryStore())
        lease = limiter.acquire_slot("inflight:ip:127.0.0.1", 1, ttl=30)
        with _settings(limiter=limiter, limit=1):
            head, get = wsgi_sent("HEAD", "/quick"), wsgi_sent("GET", "/quick")
    else:
        limiter = AsyncLimiter(AsyncMemoryStore())
        lease = await limiter.acquire_slot("inflight:ip:127.0.0.1", 1, ttl=30)
        with _settings(limiter=limiter, limit=1):
            head, get = await asgi_sent("HEAD", "/quick"), await asgi_sent("GET", "/quick")
    assert lease.allowed
    assert (head[0], get[0]) == (429, 429)
    assert head[2] == b"" and get[2] != b""
    assert head[1]["content-length"] == get[1]["content-length"] == str(len(get[2]))


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_each_signed_in_user_has_slots_of_their_own(mode: str) -> None:
    """After a signing-in middleware, ``by_user(django_user)`` counts the signed-in user: with
    user 7's stream open (not yet read: Django's test clients hand it back unread), user 7 is
    refused and user 8 admitted; once the stream is read to its end, user 7 is admitted. In
    async mode the user is found with ``request.auser()``: the lazy ``request.user``, which
    Django refuses on the event loop, is never evaluated."""
    alice, bob = {"X-Test-User": "7"}, {"X-Test-User": "8"}
    GATES[0].finish.open()
    options = {"limit": 1, "key": by_user(django_user)}
    if mode == "sync":
        stack = [SIGNED_IN, CONCURRENCY]
        with _settings(stack, limiter=Limiter(MemoryStore()), **options):
            client = Client()
            stream = client.get("/hold", headers=alice)
            codes = [client.get("/quick", headers=who).status_code for who in (alice, bob)]
            body = b"".join(stream.streaming_content)
            codes.append(client.get("/quick", headers=alice).status_code)
    else:
        stack = [SIGNED_IN_ASYNC, CONCURRENCY]
        with _settings(stack, limiter=AsyncLimiter(AsyncMemoryStore()), **options):
            aclient = AsyncClient()
            stream = await aclient.get("/ahold", headers=alice)
            codes = [(await aclient.get("/quick", headers=who)).status_code for who in (alice, bob)]
            body = b"".join([chunk async for chunk in stream.streaming_content])
            codes.append((await aclient.get("/quick", headers=alice)).status_code)
    assert stream.status_code == 200 and body == b"first,last"
    assert codes == [429, 200, 200]


@pytest.mark.redis
@pytest.mark.parametrize("failure_mode", ["open", "closed"])
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_stopped_redis_is_answered_by_the_failure_mode(
    stopped: str, failure_mode: str, mode: str
) -> None:
    """A limiter on a stopped Redis: open runs the view without a slot, closed answers 503 with
    ``Retry-After``; counted in ``ratewarden_degraded_total`` under the policy's name."""
    registry = CollectorRegistry()
    options = {"limit": 1, "failure_mode": failure_mode, "metrics": PrometheusMetrics(registry)}
    if mode == "sync":
        store: Any = RedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
        with _settings(limiter=Limiter(store), **options):
            response = Client().get("/quick")
        store.close()
    else:
        store = AsyncRedisStore.from_url(stopped, timeout=STORE_TIMEOUT)
        with _settings(limiter=AsyncLimiter(store), **options):
            response = await AsyncClient().get("/quick")
        await store.aclose()
    if failure_mode == "open":
        assert (response.status_code, response.content) == (200, b"ok")
    else:
        assert (response.status_code, response["Retry-After"]) == (503, "1")
    degraded = registry.get_sample_value(
        "ratewarden_degraded_total",
        {"rule": "inflight", "failure_mode": failure_mode, "reason": "StorageUnavailableError"},
    )
    assert degraded == 1.0


async def test_the_async_mode_s_slot_is_taken_and_given_back_on_the_event_loop() -> None:
    """In async mode the AsyncLimiter's acquire_slot and release_slot run in the event loop's
    own thread."""
    seen: list[tuple[str, int]] = []

    class Noting(AsyncLimiter):
        async def acquire_slot(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(("acquire", threading.get_ident()))
            return await super().acquire_slot(*args, **kwargs)

        async def release_slot(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(("release", threading.get_ident()))
            return await super().release_slot(*args, **kwargs)

    with _settings(limiter=Noting(AsyncMemoryStore()), limit=1):
        response = await AsyncClient().get("/quick")
    assert response.status_code == 200
    assert seen == [("acquire", threading.get_ident()), ("release", threading.get_ident())]

"""What ``identity`` may return, and the options refused when the middleware or store is built.

An identity that returned an int (a user id) made every keyed request a 500 (``object of
type 'int' has no len()``); ``0`` and ``""`` fell into the anonymous scope. A non-callable
identity, or a Redis store given the other kind of redis-py client, were taken and then
failed at every request (the sync client's SET having run, the key locked for lock_ttl).
"""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest
import redis.asyncio as aredis

from ratewarden.errors import ConfigurationError
from ratewarden.middleware._idempotency import IdempotencyPolicy
from ratewarden.middleware.idempotency import IdempotencyMiddleware, WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import (
    AsyncMemoryIdempotencyStore,
    AsyncRedisIdempotencyStore,
    MemoryIdempotencyStore,
    RedisIdempotencyStore,
)
from tests._servers import RedisServer
from tests.idempotency._apps import Orders, flask_orders, starlette_orders


def by_header(scope: Any) -> object:
    """The caller as the test names it in X-As: an int, a str, or None (no header)."""
    raw = dict(scope["headers"]).get(b"x-as")
    if raw is None:
        return None
    kind, _, value = raw.decode().partition(":")
    return int(value) if kind == "int" else value


async def _post(app: Any, who: str | None) -> httpx.Response:
    headers = {"Idempotency-Key": "k"}
    if who is not None:
        headers["X-As"] = who
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.post("/orders/a", content=b"1", headers=headers)


async def test_an_int_identity_is_a_caller_and_zero_is_not_anonymous() -> None:
    """7 runs and is replayed to 7 (and to "7", its text); 0 and "" are callers of their
    own, apart from the anonymous scope and from each other."""
    orders = Orders()
    app = IdempotencyMiddleware(
        starlette_orders(orders), AsyncMemoryIdempotencyStore(), identity=by_header
    )
    first = await _post(app, "int:7")
    assert first.status_code == 201, first.text
    again = await _post(app, "str:7")
    assert again.headers["idempotent-replayed"] == "true"
    assert orders.executed["a"] == 1
    for who in (None, "int:0", "str:"):
        answer = await _post(app, who)
        assert (answer.status_code, "idempotent-replayed" in answer.headers) == (201, False), who
    assert orders.executed["a"] == 4
    assert (await _post(app, "int:0")).headers["idempotent-replayed"] == "true"


def test_wsgi_int_identity_runs_and_replays() -> None:
    """Flask with identity=lambda environ: 42: 201, then the replay."""
    orders = Orders()
    app = flask_orders(orders)
    app.wsgi_app = WSGIIdempotencyMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, MemoryIdempotencyStore(), identity=lambda environ: 42
    )
    client = app.test_client()
    first = client.post("/orders/a", data=b"1", headers={"Idempotency-Key": "k"})
    second = client.post("/orders/a", data=b"1", headers={"Idempotency-Key": "k"})
    assert (first.status_code, second.headers.get("idempotent-replayed")) == (201, "true")
    assert orders.executed["a"] == 1


async def test_an_identity_that_is_no_name_is_refused_before_anything_runs() -> None:
    """A user object is a ConfigurationError saying what it returned and what it takes; the
    app does not run and nothing is stored."""
    orders = Orders()
    store = AsyncMemoryIdempotencyStore()
    app = IdempotencyMiddleware(starlette_orders(orders), store, identity=lambda scope: object())
    with pytest.raises(ConfigurationError, match=r"identity returned <object .*a str, a number"):
        await _post(app, None)
    assert orders.executed["a"] == 0 and len(store) == 0


def test_records_of_names_and_of_no_caller_keep_their_store_keys() -> None:
    """A str identity and None name the same records as before numbers were taken, so keys
    stored before an upgrade are still found."""

    def before(*parts: str) -> str:
        data = b"".join(b"%d:%s" % (len(p.encode()), p.encode()) for p in parts)
        return hashlib.sha256(data).hexdigest()

    pending = IdempotencyPolicy.pending
    assert pending("POST", "/p", "alice", "k", b"", b"").record == before(
        "POST", "/p", "alice", "k"
    )
    assert pending("POST", "/p", None, "k", b"", b"").record == before("POST", "/p", "", "k")
    assert pending("POST", "/p", "", "k", b"", b"").record != before("POST", "/p", "", "k")


@pytest.mark.parametrize("middleware", [IdempotencyMiddleware, WSGIIdempotencyMiddleware])
def test_an_identity_that_is_not_callable_is_refused_when_built(middleware: Any) -> None:
    """identity="x-user" names the option and what it takes."""
    asgi = middleware is IdempotencyMiddleware
    store = AsyncMemoryIdempotencyStore() if asgi else MemoryIdempotencyStore()
    with pytest.raises(ConfigurationError, match=r"identity='x-user': a callable of the"):
        middleware(lambda *a: None, store, identity="x-user")


def test_redis_stores_refuse_the_other_kind_of_client(redis_server: RedisServer) -> None:
    """The asyncio store over a blocking client, the blocking store over an asyncio client,
    and anything that is no redis-py client: a ConfigurationError naming ``client``."""
    blocking = redis_server.client()
    awaited = aredis.Redis(host="127.0.0.1", port=redis_server.port)
    with pytest.raises(ConfigurationError, match=r"AsyncRedisIdempotencyStore client=.*blocks"):
        AsyncRedisIdempotencyStore(blocking)
    with pytest.raises(ConfigurationError, match=r"RedisIdempotencyStore client=.*asyncio's"):
        RedisIdempotencyStore(awaited)
    with pytest.raises(ConfigurationError, match=r"client='redis://x': a redis-py client"):
        RedisIdempotencyStore("redis://x")
    blocking.close()

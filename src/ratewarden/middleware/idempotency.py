"""Idempotency-Key middleware: a retried write runs once, and its first response is replayed.

A client that retries a POST after a timeout or a 503 cannot know whether the
first attempt ran. With an ``Idempotency-Key`` header, this middleware makes the
retry safe: the first request with a key runs and its complete response (status,
headers, body) is stored; a later request with the same key gets that response
again, marked ``Idempotent-Replayed: true``, without running the app.

The stores live in ``ratewarden.storage.idempotency``; the middleware only needs
what ``ratewarden.idempotency`` defines (the records and the store protocols)::

    from ratewarden.storage.idempotency import AsyncRedisIdempotencyStore, MemoryIdempotencyStore

    app = IdempotencyMiddleware(app, AsyncRedisIdempotencyStore(redis.asyncio.Redis()))
    app.wsgi_app = WSGIIdempotencyMiddleware(app.wsgi_app, MemoryIdempotencyStore())

- Scope: a key belongs to method + path (+ the ``identity`` callback's answer,
  when given), so one key cannot replay another endpoint's or user's response.
- Fingerprint: the query string and body are hashed; the same key with another
  payload answers 422 and runs nothing.
- In flight: the first request holds a lock (``SET NX PX`` on Redis) for
  ``lock_ttl`` seconds; a duplicate arriving meanwhile gets 409 with
  ``Retry-After: 1``. A crashed request's lock expires on its own.
- Stored: responses for which ``store_response(status)`` is true (below 500 and
  not 408/409/425/429 by default), up to ``max_response_bytes``, for ``ttl``
  seconds. Anything else releases the lock, so a retry runs again.
- Only ``methods`` (POST and PATCH) with the header are handled; everything
  else, and non-HTTP ASGI scopes, pass through untouched.
- ``required=True`` makes the header mandatory on every request of ``methods``;
  path patterns (``"/payments/**"``) make it mandatory on those paths only. A
  request that needs it and comes without it (or with a blank one) answers 400,
  a problem document (of type ``required_docs``, your documentation's URL, when
  given), and runs nothing. With the default, False, such a request just runs.
- Bad keys answer 400, bodies over ``max_body_bytes`` 413, and an unreachable
  store 503 (or, with ``fail_open=True``, the app runs without the guarantee).
  A client that leaves before its body ends runs nothing and locks nothing (on
  WSGI it is answered a bare 400).
- ``metrics`` counts each handled request by outcome (``idempotency_request``, rule
  ``name``): ran, replayed, in_flight, mismatched, bad_key, key_missing, too_large,
  client_gone, store_failed, unguarded.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable
from io import BytesIO
from typing import Any

from ratewarden.checks import keywords_checked
from ratewarden.deprecation import moved
from ratewarden.errors import StorageError
from ratewarden.idempotency import AsyncIdempotencyStore, Claim, IdempotencyStore, StoredResponse
from ratewarden.metrics import Metrics
from ratewarden.middleware._idempotency import (
    DEFAULT_METHODS,
    RUN,
    Capture,
    IdempotencyPolicy,
    Pending,
    default_store_response,
)
from ratewarden.middleware._idempotency_checks import check_identity, check_store
from ratewarden.middleware._idempotency_wsgi import Recorded, wsgi_body, wsgi_send
from ratewarden.middleware._request import ClientGoneError, read_body, replay, route_path
from ratewarden.middleware._shielded import to_the_end
from ratewarden.middleware._types import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    StartResponse,
    WSGIApp,
)

__all__ = [
    "AsyncIdempotencyStore",
    "Claim",
    "IdempotencyMiddleware",
    "IdempotencyStore",
    "StoredResponse",
    "WSGIIdempotencyMiddleware",
    "default_store_response",
]

# The store classes this module used to hold, and where they live now: a store is storage,
# and the middleware only takes one. They still resolve here, with a DeprecationWarning,
# for one release (docs/reference.md says so).
__getattr__ = moved(
    __name__,
    dict.fromkeys(
        (
            "AsyncMemoryIdempotencyStore",
            "AsyncRedisIdempotencyStore",
            "MemoryIdempotencyStore",
            "RedisIdempotencyStore",
        ),
        "ratewarden.storage.idempotency",
    ),
)


class _Idempotency:
    """The settings both middlewares take: ``store`` (an async one for ASGI, a blocking one
    for WSGI), ``identity`` (a callable of the scope or environ naming the caller) and the
    ``IdempotencyPolicy`` options (``required``, ``required_docs``, ``name``, ``metrics``)."""

    _ASYNC: bool

    @keywords_checked
    def __init__(
        self,
        app: Any,
        store: Any,
        *,
        identity: Callable[[Any], str | None] | None = None,
        methods: Iterable[str] = DEFAULT_METHODS,
        lock_ttl: float = 60.0,
        ttl: float = 86_400.0,
        max_body_bytes: int = 1 << 20,
        max_response_bytes: int = 1 << 20,
        store_response: Callable[[int], bool] = default_store_response,
        fail_open: bool = False,
        required: bool | str | re.Pattern[str] | Iterable[str | re.Pattern[str]] = False,
        required_docs: str | None = None,
        name: str = "idempotency",
        metrics: Metrics | None = None,
    ) -> None:
        check_store(store, self._ASYNC, type(self).__name__)
        check_identity(identity, self._ASYNC, type(self).__name__)
        self.app, self.store, self.identity = app, store, identity
        self.policy = IdempotencyPolicy(
            methods=methods,
            lock_ttl=lock_ttl,
            ttl=ttl,
            max_body_bytes=max_body_bytes,
            max_response_bytes=max_response_bytes,
            store_response=store_response,
            fail_open=fail_open,
            required=required,
            required_docs=required_docs,
            name=name,
            metrics=metrics,
        )


class IdempotencyMiddleware(_Idempotency):
    """ASGI: run each (method, path, identity, Idempotency-Key) once; replay its response.

    ``identity(scope)`` names the caller (user id, API key) so keys are scoped per
    caller; without it, keys are shared by everyone on the same method and path.
    """

    _ASYNC = True
    app: ASGIApp
    store: AsyncIdempotencyStore

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        policy = self.policy
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        values = [
            v.decode("latin-1") for n, v in scope["headers"] if n.lower() == b"idempotency-key"
        ]
        # ``required`` patterns see the path the app routes (no root_path), as rules' do; the
        # record, the whole path.
        key = policy.key_of(scope["method"], route_path(scope), values)
        if key is None:
            return await self.app(scope, receive, send)
        if isinstance(key, StoredResponse):
            return await _asgi_send(send, key)
        try:
            body = await read_body(receive, policy.max_body)
        except ClientGoneError:  # nobody to answer; counted, so the outcomes add up
            policy.client_gone()
            return None
        if body is None:
            return await _asgi_send(send, policy.too_large())
        replaying = replay(body, receive)
        identity = self.identity(scope) if self.identity else None
        query = scope.get("query_string", b"")
        pending = policy.pending(scope["method"], scope["path"], identity, key, query, body)
        found: Claim | StorageError
        try:
            found = await self.store.begin(
                pending.record, pending.fingerprint, pending.token, policy.lock_ttl
            )
        except StorageError as exc:
            found = exc
        except asyncio.CancelledError:
            # The SET may have left before the cancel and land after it: give its lock back
            # (by the token chosen before sending), to its end through further cancels, or
            # every retry is "still in progress" for lock_ttl while the app never ran.
            with policy.tolerated():
                await to_the_end(self.store.release(pending.record, pending.token))
            raise
        answer = policy.begun(found, pending.fingerprint)
        if answer == RUN:
            return await self._run(scope, replaying, send, pending.record, pending.token)
        try:
            if isinstance(answer, StoredResponse):
                await _asgi_send(send, answer)
            else:
                await self.app(scope, replaying, send)
        finally:
            if isinstance(found, StorageError):
                # The SET may land after all (held up in a paused server): give its lock
                # back once the answer is out, or the key stays locked for lock_ttl.
                with policy.tolerated():
                    await to_the_end(self.store.release(pending.record, pending.token))

    async def _run(
        self, scope: Scope, receive: Receive, send: Send, record: str, token: str
    ) -> None:
        capture = Capture(self.policy.max_response)
        settled = False

        async def settle(done: Capture | None) -> None:
            nonlocal settled
            if settled:
                return
            settled = True
            await to_the_end(self._settle(record, token, done))

        async def capturing_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                capture.start(message["status"], message.get("headers", ()))
            elif message["type"] == "http.response.body":
                capture.add(message.get("body", b""))
                if not message.get("more_body", False):
                    # Stored before the client can have the whole response, so that a retry
                    # sent the moment it arrives is replayed, not told "still in progress"
                    # while the app winds down (Django's handler closes the response after).
                    await settle(capture)
            await send(message)

        try:
            await self.app(scope, receive, capturing_send)
        finally:
            await settle(None)

    async def _settle(self, record: str, token: str, done: Capture | None) -> None:
        """Store the response ``done`` captured for retries, or give the lock back."""
        response = self.policy.to_store(done)
        with self.policy.tolerated():
            if response is not None:
                self.policy.lost(
                    await self.store.complete(record, token, response, self.policy.ttl)
                )
            else:
                await self.store.release(record, token)


async def _asgi_send(send: Send, response: StoredResponse) -> None:
    await send(
        {"type": "http.response.start", "status": response.status, "headers": response.headers}
    )
    await send({"type": "http.response.body", "body": response.body})


class WSGIIdempotencyMiddleware(_Idempotency):
    """WSGI (Flask, Django): the same behaviour as ``IdempotencyMiddleware``.

    ``identity(environ)`` names the caller. The request body is read (up to
    ``max_body_bytes``) and handed to the app again from memory.
    """

    _ASYNC = False
    app: WSGIApp
    store: IdempotencyStore

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Handle one WSGI request."""
        policy = self.policy
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        raw = environ.get("HTTP_IDEMPOTENCY_KEY")
        # ``required`` patterns see PATH_INFO, as rules' do; the record, the mount point too.
        routed = str(environ.get("PATH_INFO", "") or "/")
        key = policy.key_of(method, routed, [] if raw is None else [raw])
        if key is None:
            return self.app(environ, start_response)
        if isinstance(key, StoredResponse):
            return wsgi_send(start_response, key)
        try:
            body = wsgi_body(environ, policy.max_body)
        except ClientGoneError:
            return wsgi_send(start_response, policy.client_gone())
        if body is None:
            return wsgi_send(start_response, policy.too_large())
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = BytesIO(body), str(len(body))
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        identity = self.identity(environ) if self.identity else None
        query = str(environ.get("QUERY_STRING", "")).encode("latin-1")
        pending = policy.pending(method, path, identity, key, query, body)
        found: Claim | StorageError
        try:
            found = self.store.begin(
                pending.record, pending.fingerprint, pending.token, policy.lock_ttl
            )
        except StorageError as exc:
            found = exc
        answer = policy.begun(found, pending.fingerprint)
        if isinstance(found, StorageError):
            return self._given_back(environ, start_response, answer, pending)
        if isinstance(answer, StoredResponse):
            return wsgi_send(start_response, answer)
        capture = Capture(policy.max_response)

        def capturing_start(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            encoded = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers]
            capture.start(int(status.split(" ", 1)[0]), encoded)
            write = start_response(status, headers, *exc)

            def capturing_write(data: bytes) -> Any:
                # PEP 3333's write(): its output goes out before the iterable's, and is
                # part of the response a retry must see again.
                capture.add(data)
                return write(data)

            return capturing_write

        def settle(done: Capture | None) -> None:
            response = policy.to_store(done)
            with policy.tolerated():
                if response is not None:
                    policy.lost(
                        self.store.complete(pending.record, pending.token, response, policy.ttl)
                    )
                else:
                    self.store.release(pending.record, pending.token)

        try:
            result = self.app(environ, capturing_start)
        except BaseException:
            settle(None)
            raise
        return Recorded(result, capture, settle)

    def _given_back(
        self, environ: dict[str, Any], start_response: StartResponse, answer: Any, pending: Pending
    ) -> Iterable[bytes]:
        """The answer to a failed ``begin`` (the 503, or the app run unguarded), giving the lock
        back when the server closes it: the SET may land after all, held up in a paused server."""

        def give_back(_: Capture | None) -> None:
            with self.policy.tolerated():
                self.store.release(pending.record, pending.token)

        try:
            if isinstance(answer, StoredResponse):
                result: Iterable[bytes] = wsgi_send(start_response, answer)
            else:
                result = self.app(environ, start_response)
        except BaseException:
            give_back(None)
            raise
        return Recorded(result, None, give_back)

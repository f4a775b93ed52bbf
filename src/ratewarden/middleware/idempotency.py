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
- Bad keys answer 400, bodies over ``max_body_bytes`` 413, and an unreachable
  store 503 (or, with ``fail_open=True``, the app runs without the guarantee).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import logging
import math
import re
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from dataclasses import replace
from http import HTTPStatus
from io import BytesIO
from typing import Any

from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.idempotency import AsyncIdempotencyStore, Claim, IdempotencyStore, StoredResponse

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
_MOVED = {
    "AsyncMemoryIdempotencyStore": "ratewarden.storage.idempotency",
    "AsyncRedisIdempotencyStore": "ratewarden.storage.idempotency",
    "MemoryIdempotencyStore": "ratewarden.storage.idempotency",
    "RedisIdempotencyStore": "ratewarden.storage.idempotency",
}


def __getattr__(name: str) -> Any:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"ratewarden.middleware.idempotency.{name} is deprecated; import {name} from {home}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)


log = logging.getLogger("ratewarden.idempotency")

REPLAYED = (b"idempotent-replayed", b"true")
DEFAULT_METHODS = frozenset({"PATCH", "POST"})
# Visible ASCII but '"' and ',' (so a joined header can't pass as one key), 1-255 chars.
_KEY = re.compile(r'"([!#-+\--~]{1,255})"|([!#-+\--~]{1,255})')
_NOT_STORED = frozenset({408, 409, 425, 429})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
StartResponse = Callable[..., Callable[[bytes], object]]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def default_store_response(status: int) -> bool:
    """Keep answers a retry should see again; not 5xx or 408/409/425/429, which invite a retry."""
    return status < 500 and status not in _NOT_STORED


def _problem(status: int, detail: str, *, retry_after: int | None = None) -> StoredResponse:
    title = HTTPStatus(status).phrase
    body = json.dumps({"type": "about:blank", "title": title, "status": status, "detail": detail})
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    return StoredResponse(status, tuple(headers), body.encode())


def _check_seconds(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(f"idempotency middleware {name}={value!r}: seconds, more than 0")
    return float(value)


def _check_bytes(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"idempotency middleware {name}={value!r}: a byte count >= 0")
    return value


def _length_prefixed(*parts: str | bytes) -> bytes:
    data = [p.encode("utf-8", "surrogateescape") if isinstance(p, str) else p for p in parts]
    return b"".join(b"%d:%s" % (len(p), p) for p in data)


class _Capture:
    """The response as it goes out, kept while it fits in ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.status = 0
        self.headers: tuple[tuple[bytes, bytes], ...] = ()
        self.chunks: list[bytes] = []
        self.size = 0
        self.overflow = False

    def start(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
        self.status = status
        self.headers = tuple((bytes(n).lower(), bytes(v)) for n, v in headers)

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            self.overflow = True
            self.chunks.clear()
        elif not self.overflow and chunk:
            self.chunks.append(bytes(chunk))

    def response(self) -> StoredResponse | None:
        if self.overflow or not self.status:
            return None
        return StoredResponse(self.status, self.headers, b"".join(self.chunks))


class _Policy:
    """Everything but the I/O, shared by the ASGI and WSGI middleware."""

    def __init__(
        self,
        *,
        methods: Iterable[str],
        lock_ttl: float,
        ttl: float,
        max_body_bytes: int,
        max_response_bytes: int,
        store_response: Callable[[int], bool],
        fail_open: bool,
    ) -> None:
        if isinstance(methods, str) or not all(isinstance(m, str) for m in methods):
            raise ConfigurationError(f"idempotency methods={methods!r}: a set of method names")
        if not callable(store_response):
            raise ConfigurationError(f"store_response={store_response!r}: a function of a status")
        self.methods = frozenset(m.upper() for m in methods)
        self.lock_ttl = _check_seconds("lock_ttl", lock_ttl)
        self.ttl = _check_seconds("ttl", ttl)
        self.max_body = _check_bytes("max_body_bytes", max_body_bytes)
        self.max_response = _check_bytes("max_response_bytes", max_response_bytes)
        self.store_response = store_response
        self.fail_open = bool(fail_open)

    @staticmethod
    def parse_key(values: list[str]) -> str | StoredResponse:
        """The key from the header's values, or the 400 that explains what is wrong with it."""
        if len(values) != 1:
            return _problem(400, "send exactly one Idempotency-Key header")
        match = _KEY.fullmatch(values[0].strip())
        if match is None:
            return _problem(
                400,
                "Idempotency-Key must be 1-255 visible ASCII characters without '\"' or ','"
                " (a UUID is a good key)",
            )
        return match.group(1) or match.group(2)

    @staticmethod
    def record_key(method: str, path: str, identity: str | None, key: str) -> str:
        """A fixed-length store key for (method, path, identity, key); parts cannot alias."""
        return hashlib.sha256(_length_prefixed(method, path, identity or "", key)).hexdigest()

    @staticmethod
    def fingerprint(query: bytes, body: bytes) -> str:
        """What must match for a request to count as a retry of the stored one."""
        return hashlib.sha256(_length_prefixed(query, body)).hexdigest()

    @staticmethod
    def early_answer(claim: Claim, fingerprint: str) -> StoredResponse | None:
        """The answer that needs no app run (replay, 409, 422), or None to run the app."""
        if claim.state == "acquired":
            return None
        if claim.fingerprint != fingerprint:
            return _problem(
                422,
                "this Idempotency-Key was used with another request body or query; "
                "use a new key for a new request",
            )
        if claim.state == "in_flight" or claim.response is None:
            return _problem(
                409, "a request with this Idempotency-Key is still in progress", retry_after=1
            )
        return replace(claim.response, headers=(*claim.response.headers, REPLAYED))

    @staticmethod
    def unavailable() -> StoredResponse:
        """The answer when the store cannot be reached and ``fail_open`` is off."""
        return _problem(503, "the idempotency store is unavailable; retry later", retry_after=1)

    def to_store(self, capture: _Capture) -> StoredResponse | None:
        """The captured response if it should be replayed to retries."""
        response = capture.response()
        if response is None:
            if capture.overflow:
                log.warning(
                    "idempotent response of %d bytes exceeds max_response_bytes=%d; not stored",
                    capture.size,
                    self.max_response,
                )
            return None
        return response if self.store_response(response.status) else None


def _check_store(store: object, want_async: bool, who: str) -> None:
    begin = getattr(store, "begin", None)
    if begin is None or inspect.iscoroutinefunction(begin) != want_async:
        kind = "an async store (AsyncMemoryIdempotencyStore, AsyncRedisIdempotencyStore)"
        if not want_async:
            kind = "a sync store (MemoryIdempotencyStore, RedisIdempotencyStore)"
        raise ConfigurationError(f"{who} needs {kind}, got {store!r}")


class IdempotencyMiddleware:
    """ASGI: run each (method, path, identity, Idempotency-Key) once; replay its response.

    ``identity(scope)`` names the caller (user id, API key) so keys are scoped per
    caller; without it, keys are shared by everyone on the same method and path.
    """

    def __init__(
        self,
        app: ASGIApp,
        store: AsyncIdempotencyStore,
        *,
        identity: Callable[[Scope], str | None] | None = None,
        methods: Iterable[str] = DEFAULT_METHODS,
        lock_ttl: float = 60.0,
        ttl: float = 86_400.0,
        max_body_bytes: int = 1 << 20,
        max_response_bytes: int = 1 << 20,
        store_response: Callable[[int], bool] = default_store_response,
        fail_open: bool = False,
    ) -> None:
        _check_store(store, True, "IdempotencyMiddleware")
        self.app, self.store, self.identity = app, store, identity
        self.policy = _Policy(
            methods=methods,
            lock_ttl=lock_ttl,
            ttl=ttl,
            max_body_bytes=max_body_bytes,
            max_response_bytes=max_response_bytes,
            store_response=store_response,
            fail_open=fail_open,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        if scope["type"] != "http" or scope["method"] not in self.policy.methods:
            return await self.app(scope, receive, send)
        values = [
            v.decode("latin-1") for n, v in scope["headers"] if n.lower() == b"idempotency-key"
        ]
        if not values:
            return await self.app(scope, receive, send)
        key = self.policy.parse_key(values)
        if isinstance(key, StoredResponse):
            return await _asgi_send(send, key)
        try:
            body = await _asgi_body(receive, self.policy.max_body)
        except _ClientGoneError:
            return None
        if body is None:
            return await _asgi_send(send, _problem(413, "request body too large to fingerprint"))
        replay = _asgi_replay(body, receive)
        identity = self.identity(scope) if self.identity else None
        record = self.policy.record_key(scope["method"], scope["path"], identity, key)
        fingerprint = self.policy.fingerprint(scope.get("query_string", b""), body)
        token = uuid.uuid4().hex
        try:
            claim = await self.store.begin(record, fingerprint, token, self.policy.lock_ttl)
        except StorageError as exc:
            log.warning("idempotency store failed at begin: %s", exc)
            if self.policy.fail_open:
                return await self.app(scope, replay, send)
            return await _asgi_send(send, self.policy.unavailable())
        answer = self.policy.early_answer(claim, fingerprint)
        if answer is not None:
            return await _asgi_send(send, answer)
        await self._run(scope, replay, send, record, token)

    async def _run(
        self, scope: Scope, receive: Receive, send: Send, record: str, token: str
    ) -> None:
        capture = _Capture(self.policy.max_response)
        finished = False

        async def capturing_send(message: Message) -> None:
            nonlocal finished
            if message["type"] == "http.response.start":
                capture.start(message["status"], message.get("headers", ()))
            elif message["type"] == "http.response.body":
                capture.add(message.get("body", b""))
                finished = not message.get("more_body", False)
            await send(message)

        try:
            await self.app(scope, receive, capturing_send)
        finally:
            await self._settle(self.policy.to_store(capture) if finished else None, record, token)

    async def _settle(self, response: StoredResponse | None, record: str, token: str) -> None:
        try:
            if response is not None:
                if not await self.store.complete(record, token, response, self.policy.ttl):
                    log.warning("idempotency lock expired before the response; not stored")
            else:
                await self.store.release(record, token)
        except StorageError as exc:
            log.warning("idempotency store failed after the response: %s", exc)


class _ClientGoneError(Exception):
    """The client disconnected before its request body arrived: nobody to answer."""


async def _asgi_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None past ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _ClientGoneError
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _asgi_replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _asgi_send(send: Send, response: StoredResponse) -> None:
    await send(
        {"type": "http.response.start", "status": response.status, "headers": response.headers}
    )
    await send({"type": "http.response.body", "body": response.body})


class WSGIIdempotencyMiddleware:
    """WSGI (Flask, Django): the same behaviour as ``IdempotencyMiddleware``.

    ``identity(environ)`` names the caller. The request body is read (up to
    ``max_body_bytes``) and handed to the app again from memory.
    """

    def __init__(
        self,
        app: WSGIApp,
        store: IdempotencyStore,
        *,
        identity: Callable[[dict[str, Any]], str | None] | None = None,
        methods: Iterable[str] = DEFAULT_METHODS,
        lock_ttl: float = 60.0,
        ttl: float = 86_400.0,
        max_body_bytes: int = 1 << 20,
        max_response_bytes: int = 1 << 20,
        store_response: Callable[[int], bool] = default_store_response,
        fail_open: bool = False,
    ) -> None:
        _check_store(store, False, "WSGIIdempotencyMiddleware")
        self.app, self.store, self.identity = app, store, identity
        self.policy = _Policy(
            methods=methods,
            lock_ttl=lock_ttl,
            ttl=ttl,
            max_body_bytes=max_body_bytes,
            max_response_bytes=max_response_bytes,
            store_response=store_response,
            fail_open=fail_open,
        )

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Handle one WSGI request."""
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        raw = environ.get("HTTP_IDEMPOTENCY_KEY")
        if method not in self.policy.methods or raw is None:
            return self.app(environ, start_response)
        key = self.policy.parse_key([raw])
        if isinstance(key, StoredResponse):
            return _wsgi_send(start_response, key)
        body = _wsgi_body(environ, self.policy.max_body)
        if body is None:
            return _wsgi_send(
                start_response, _problem(413, "request body too large to fingerprint")
            )
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = BytesIO(body), str(len(body))
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        identity = self.identity(environ) if self.identity else None
        record = self.policy.record_key(method, path, identity, key)
        query = str(environ.get("QUERY_STRING", "")).encode("latin-1")
        fingerprint = self.policy.fingerprint(query, body)
        token = uuid.uuid4().hex
        try:
            claim = self.store.begin(record, fingerprint, token, self.policy.lock_ttl)
        except StorageError as exc:
            log.warning("idempotency store failed at begin: %s", exc)
            if self.policy.fail_open:
                return self.app(environ, start_response)
            return _wsgi_send(start_response, self.policy.unavailable())
        answer = self.policy.early_answer(claim, fingerprint)
        if answer is not None:
            return _wsgi_send(start_response, answer)
        capture = _Capture(self.policy.max_response)

        def capturing_start(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            encoded = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in headers]
            capture.start(int(status.split(" ", 1)[0]), encoded)
            return start_response(status, headers, *exc)

        try:
            result = self.app(environ, capturing_start)
        except BaseException:
            self._settle(None, record, token)
            raise
        return _Recorded(result, capture, lambda done: self._settle(done, record, token))

    def _settle(self, capture: _Capture | None, record: str, token: str) -> None:
        response = self.policy.to_store(capture) if capture is not None else None
        try:
            if response is not None:
                if not self.store.complete(record, token, response, self.policy.ttl):
                    log.warning("idempotency lock expired before the response; not stored")
            else:
                self.store.release(record, token)
        except StorageError as exc:
            log.warning("idempotency store failed after the response: %s", exc)


class _Recorded:
    """The app's response iterable, captured as it is sent. The key is settled when
    the last chunk has gone out, or on close() if the response was cut short."""

    def __init__(
        self,
        result: Iterable[bytes],
        capture: _Capture,
        settle: Callable[[_Capture | None], None],
    ) -> None:
        self._result, self._capture, self._settle_with = result, capture, settle
        self._settled = False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._result:
            self._capture.add(chunk)
            yield chunk
        self._settle(self._capture)

    def close(self) -> None:
        """Close the app's iterable (WSGI requires it) and release an unsettled key."""
        try:
            close = getattr(self._result, "close", None)
            if close is not None:
                close()
        finally:
            self._settle(None)

    def _settle(self, capture: _Capture | None) -> None:
        if not self._settled:
            self._settled = True
            self._settle_with(capture)


def _wsgi_body(environ: dict[str, Any], limit: int) -> bytes | None:
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        return None
    if length:
        return bytes(stream.read(length))
    if environ.get("wsgi.input_terminated"):
        body = bytes(stream.read(limit + 1))
        return None if len(body) > limit else body
    return b""


def _wsgi_send(start_response: StartResponse, response: StoredResponse) -> list[bytes]:
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in response.headers]
    start_response(f"{response.status} {reason}", headers)
    return [response.body]

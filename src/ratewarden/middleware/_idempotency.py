"""The Idempotency-Key middlewares' logic, with no I/O: what both the ASGI and WSGI one do.

A request goes through these steps; the drivers (``idempotency``) do the I/O
between them: read the body, call the store, run the app, send a response.

1. ``key_of``: is the request handled (method, header), is its key valid (400), and
   is a missing key allowed (``required``: 400 when it is not)?
2. ``pending``: the store record, the request's fingerprint and this run's token.
3. ``begun``: what the store's ``begin`` found (or the ``StorageError`` it raised)
   means: run the app, let it run without the guarantee (``fail_open``), or send
   a response (a replay, 409, 422, 503).
4. ``to_store``: what the captured response leaves in the store for retries.

Each request handled gets one ``metrics.idempotency_request`` outcome, counted by
the step that answers it (``key_of``, ``too_large``, ``client_gone``, ``begun``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import numbers
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from http import HTTPStatus
from logging import WARNING
from typing import Literal, NamedTuple

from ratewarden.checks import check_bool
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.idempotency import Claim, StoredResponse
from ratewarden.limiter import check_metrics
from ratewarden.metrics import LogRateLimiter, Metrics
from ratewarden.middleware._idempotency_checks import (
    check_bytes,
    check_required,
    check_required_docs,
    check_seconds,
)
from ratewarden.middleware._rules import check_method, check_name

__all__ = [
    "DEFAULT_METHODS",
    "RUN",
    "UNGUARDED",
    "Capture",
    "IdempotencyPolicy",
    "Pending",
    "default_store_response",
    "problem",
]

log = logging.getLogger("ratewarden.idempotency")

REPLAYED = (b"idempotent-replayed", b"true")
DEFAULT_METHODS = frozenset({"PATCH", "POST"})
# Visible ASCII but '"' and ',' (so a joined header can't pass as one key), 1-255 chars.
_KEY = re.compile(r'"([!#-+\--~]{1,255})"|([!#-+\--~]{1,255})')
_NOT_STORED = frozenset({408, 409, 425, 429})
_BARE = ((b"content-length", b"0"),)

#: ``begun``'s answers besides a response to send: run the app holding the lock, or run it
#: without the guarantee (the store failed and ``fail_open`` is on).
RUN: Literal["run"] = "run"
UNGUARDED: Literal["unguarded"] = "unguarded"


def default_store_response(status: int) -> bool:
    """Keep answers a retry should see again; not 5xx or 408/409/425/429, which invite a retry."""
    return status < 500 and status not in _NOT_STORED


def problem(
    status: int,
    detail: str,
    *,
    retry_after: int | None = None,
    type_uri: str | None = None,
    title: str | None = None,
) -> StoredResponse:
    """A problem document (RFC 9457) response, as the store keeps responses: of type
    ``about:blank`` titled with the status's phrase unless ``type_uri`` and ``title`` say."""
    document = {
        "type": type_uri or "about:blank",
        "title": title or HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }
    body = json.dumps(document)
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    return StoredResponse(status, tuple(headers), body.encode())


def _length_prefixed(*parts: str | bytes) -> bytes:
    data = [p.encode("utf-8", "surrogateescape") if isinstance(p, str) else p for p in parts]
    return b"".join(b"%d:%s" % (len(p), p) for p in data)


def _scope_parts(identity: object, key: str) -> tuple[str | bytes, ...]:
    """The identity and key parts of a record's name. None, the anonymous scope, is an empty
    part, and a name its text, as before numbers were taken (records keep their names); a
    number or UUID is its ``str()``; the empty name is a scope of its own: one part more."""
    if identity is None:
        return ("", key)
    if isinstance(identity, str | bytes):
        return (identity, key) if identity else (identity, key, "")
    if isinstance(identity, numbers.Number | uuid.UUID) and not isinstance(identity, bool):
        return (str(identity), key)
    if inspect.iscoroutine(identity):
        identity.close()  # never awaited: closed, so Python does not warn of it as well
    raise ConfigurationError(
        f"idempotency middleware identity returned {identity!r}, a {type(identity).__name__}: "
        "it names the caller with a str, a number or a UUID (None: no caller, the shared "
        "anonymous scope); nothing was run or stored"
    )


class Capture:
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


class Pending(NamedTuple):
    """A handled request before the store is asked: its record, fingerprint and token."""

    record: str
    fingerprint: str
    token: str


class IdempotencyPolicy:
    """The checked settings and every step of a request that is not I/O."""

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
        required: bool | str | re.Pattern[str] | Iterable[str | re.Pattern[str]] = False,
        required_docs: str | None = None,
        name: str = "idempotency",
        metrics: Metrics | None = None,
    ) -> None:
        self.name = check_name(name)
        self.metrics = check_metrics("idempotency middleware", metrics, ("idempotency_request",))
        if isinstance(methods, str) or not isinstance(methods, Iterable):
            raise ConfigurationError(f"idempotency methods={methods!r}: a set of method names")
        if not callable(store_response):
            raise ConfigurationError(f"store_response={store_response!r}: a function of a status")
        check_bool("idempotency middleware fail_open", fail_open)
        self.methods = frozenset(check_method(m, "idempotency methods").upper() for m in methods)
        if not self.methods:
            raise ConfigurationError(
                f"idempotency methods={methods!r}: no method, so the middleware would guard "
                "nothing; give the methods it handles, such as {'POST', 'PATCH'} (the default)"
            )
        self.lock_ttl = check_seconds("lock_ttl", lock_ttl)
        self.ttl = check_seconds("ttl", ttl)
        self.max_body = check_bytes("max_body_bytes", max_body_bytes)
        self.max_response = check_bytes("max_response_bytes", max_response_bytes)
        self.store_response = store_response
        self.fail_open = fail_open
        #: True (a key on every request of ``methods``), False, or the path patterns.
        self.required = check_required(required)
        self.required_docs = check_required_docs(required_docs, self.required)
        #: Each kind of warning at most once a minute, with the count held back (as the
        #: other middlewares' lines): a store down would otherwise log every request.
        self.lines = LogRateLimiter(60.0)

    def key_of(self, method: str, path: str, values: list[str]) -> str | StoredResponse | None:
        """The request's key; None when the middleware does not handle the request (another
        method, or no header where none is required); the 400 that says what is wrong with a
        bad key, or that a key is required here (and then missing, or blank)."""
        if method not in self.methods:
            return None
        if not any(v.strip() for v in values):
            if self._requires(path):
                return self._missing(method, path)
            if not values:
                return None
        if len(values) != 1:
            return self.answer("bad_key", problem(400, "send exactly one Idempotency-Key header"))
        match = _KEY.fullmatch(values[0].strip())
        if match is None:
            return self.answer(
                "bad_key",
                problem(
                    400,
                    "Idempotency-Key must be 1-255 visible ASCII characters without '\"' or ','"
                    " (a UUID is a good key)",
                ),
            )
        return match.group(1) or match.group(2)

    def count(self, outcome: str) -> None:
        """A handled request's ``outcome``, counted by ``metrics.idempotency_request``."""
        self.metrics.idempotency_request(rule=self.name, outcome=outcome)

    def answer(self, outcome: str, response: StoredResponse) -> StoredResponse:
        """``response``, the request counted as ``outcome``."""
        self.count(outcome)
        return response

    def _requires(self, path: str) -> bool:
        if isinstance(self.required, bool):
            return self.required
        return any(pattern.fullmatch(path) for pattern in self.required)

    def _missing(self, method: str, path: str) -> StoredResponse:
        """The 400 of a request that needs a key and came without one (or with a blank one)."""
        detail = (
            f"an Idempotency-Key header is required for {method} {path}: send a new unique key"
            " (a UUID) with each new request, and the same key again when you retry it"
        )
        if self.required_docs is None:
            return self.answer("key_missing", problem(400, detail))
        title = "Idempotency-Key is required"
        return self.answer(
            "key_missing", problem(400, detail, type_uri=self.required_docs, title=title)
        )

    def client_gone(self) -> StoredResponse:
        """The answer to a request whose client left before its body ended, counted as
        ``client_gone``: a bare 400 (sent on WSGI, where the server may still deliver it; on
        ASGI there is nobody to send it to). Nothing was locked: a retry runs."""
        return self.answer("client_gone", StoredResponse(400, _BARE, b""))

    def too_large(self) -> StoredResponse:
        """The answer to a body over ``max_body_bytes``: it cannot be fingerprinted."""
        return self.answer("too_large", problem(413, "request body too large to fingerprint"))

    @staticmethod
    def pending(
        method: str, path: str, identity: object, key: str, query: bytes, body: bytes
    ) -> Pending:
        """The store record of (method, path, identity, key), a fixed-length key whose parts
        cannot alias; the fingerprint a retry must match (query and body); a fresh token."""
        scope = _length_prefixed(method, path, *_scope_parts(identity, key))
        record = hashlib.sha256(scope).hexdigest()
        fingerprint = hashlib.sha256(_length_prefixed(query, body)).hexdigest()
        return Pending(record, fingerprint, uuid.uuid4().hex)

    def begun(
        self, found: Claim | StorageError, fingerprint: str
    ) -> StoredResponse | Literal["run", "unguarded"]:
        """What the store's ``begin`` gave means: ``RUN`` the app (the lock is ours),
        ``UNGUARDED`` (the store failed, ``fail_open``), else the response to send."""
        if isinstance(found, StorageError):
            self.lines.log(log, WARNING, "begin", "idempotency store failed at begin: %s", found)
            if self.fail_open:
                self.count("unguarded")
                return UNGUARDED
            detail = "the idempotency store is unavailable; retry later"
            return self.answer("store_failed", problem(503, detail, retry_after=1))
        if found.state == "acquired":
            self.count("ran")
            return RUN
        if found.fingerprint != fingerprint:
            detail = (
                "this Idempotency-Key was used with another request body or query; "
                "use a new key for a new request"
            )
            return self.answer("mismatched", problem(422, detail))
        if found.state == "in_flight" or found.response is None:
            detail = "a request with this Idempotency-Key is still in progress"
            return self.answer("in_flight", problem(409, detail, retry_after=1))
        replayed = replace(found.response, headers=(*found.response.headers, REPLAYED))
        return self.answer("replayed", replayed)

    def to_store(self, capture: Capture | None) -> StoredResponse | None:
        """The captured response if it should be replayed to retries (None: release the
        lock so that a retry runs again); ``capture`` None: the response never finished."""
        if capture is None:
            return None
        response = capture.response()
        if response is None:
            if capture.overflow:
                self.lines.log(
                    log,
                    WARNING,
                    "overflow",
                    "idempotent response of %d bytes exceeds max_response_bytes=%d; not stored",
                    capture.size,
                    self.max_response,
                )
            return None
        return response if self.store_response(response.status) else None

    @contextmanager
    def tolerated(self) -> Iterator[None]:
        """The store failing after the response is logged: the lock's TTL frees the key."""
        try:
            yield
        except StorageError as exc:
            self.lines.log(
                log, WARNING, "after", "idempotency store failed after the response: %s", exc
            )

    def lost(self, completed: bool) -> None:
        """Log a response the store did not keep because the lock expired first."""
        if not completed:
            self.lines.log(
                log, WARNING, "expired", "idempotency lock expired before the response; not stored"
            )

"""What an Idempotency-Key store and its middleware exchange: records and the store protocols.

A leaf, like ``ratewarden.decision``: the stores (``ratewarden.storage.idempotency``)
build these values and the middleware (``ratewarden.middleware.idempotency``) reads
them, and neither imports the other. A store of your own satisfies
``IdempotencyStore`` (WSGI) or ``AsyncIdempotencyStore`` (ASGI) structurally.

A record is a lock while its request runs (``begin`` takes it with the caller's
token, for ``lock_ttl`` seconds) and the stored response once it is done
(``complete`` swaps the lock for the response, for ``ttl`` seconds, only if the
caller still holds it). ``release`` drops a lock without storing anything, so a
retry runs again.

Each call may reach the store twice: a client that timed out sends it again (redis-py
does, by default), and the first copy may still land. So a store answers a copy as it
answered the first: ``begin`` that finds a lock of the caller's own token says
``acquired``, and ``complete`` that finds the record already holding this response
says True.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["AsyncIdempotencyStore", "Claim", "IdempotencyStore", "StoredResponse"]


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A complete response, as stored for replay. Header names are lower-case bytes."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    def encode(self) -> bytes:
        """ASCII JSON (headers as latin-1 text, the body in base64), for Redis."""
        doc = {
            "s": self.status,
            "h": [[n.decode("latin-1"), v.decode("latin-1")] for n, v in self.headers],
            "b": base64.b64encode(self.body).decode(),
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> StoredResponse:
        """The inverse of ``encode``."""
        doc = json.loads(data)
        headers = tuple((n.encode("latin-1"), v.encode("latin-1")) for n, v in doc["h"])
        return cls(int(doc["s"]), headers, base64.b64decode(doc["b"]))


@dataclass(frozen=True, slots=True)
class Claim:
    """What ``begin`` found under a key: ``acquired`` (the caller runs the request and
    holds the lock), ``in_flight`` (another request holds it) or ``done`` (with its response).
    ``fingerprint`` is the stored request's (empty when acquired)."""

    state: Literal["acquired", "in_flight", "done"]
    fingerprint: str = ""
    response: StoredResponse | None = None


class IdempotencyStore(Protocol):
    """Where keys live, for the WSGI middleware. Durations in seconds."""

    def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """Take the lock for ``key`` if nothing is stored, else say what is there (a lock
        of ``token`` itself is ``acquired``)."""
        ...

    def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """Replace the lock held by ``token`` with ``response``; False if it was lost (True
        if the record already holds ``response``)."""
        ...

    def release(self, key: str, token: str) -> None:
        """Drop the lock held by ``token`` (nothing stored: a retry runs again)."""
        ...


class AsyncIdempotencyStore(Protocol):
    """The asyncio twin of ``IdempotencyStore``, for the ASGI middleware."""

    async def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """Take the lock for ``key`` if nothing is stored, else say what is there (a lock
        of ``token`` itself is ``acquired``)."""
        ...

    async def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """Replace the lock held by ``token`` with ``response``; False if it was lost (True
        if the record already holds ``response``)."""
        ...

    async def release(self, key: str, token: str) -> None:
        """Drop the lock held by ``token``."""
        ...

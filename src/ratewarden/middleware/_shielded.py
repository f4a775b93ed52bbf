"""Store work a response's end starts, run to its end even when the response's task is cancelled.

A middleware gives back what a request held (a concurrency slot, a token budget's
reservation, an idempotency lock) after the response's last body message, or in a
``finally`` when the app is cut short. Both run in a task that may be cancelled
right then: Starlette's ``StreamingResponse`` under a server whose scope says
ASGI ``spec_version`` below 2.4 (uvicorn says 2.3) cancels the streaming task as
soon as ``receive()`` returns ``http.disconnect``, which servers return once the
response is complete (uvicorn, httpx's ``ASGITransport``) or the client has
gone; Django's ASGI handler cancels the view's task when the client goes. A
store call cut there may never reach the store (a reply still to wait for, a
script to load again): the slot stays taken, the estimate stays charged, the key
stays locked, until their TTL.

``to_the_end(work)`` awaits ``work`` in a task of its own and, when the awaiting
task is cancelled meanwhile, waits on for it (again after each cancellation:
anyio's cancel scopes repeat theirs every loop turn) and then raises the
cancellation: the work ends first, bounded by the store's own timeout, and the
cancellation still propagates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["to_the_end"]

T = TypeVar("T")


async def to_the_end(work: Awaitable[T]) -> T:
    """``await work``, not cut short by a cancellation of the caller, which is raised after it."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if task.done():  # the work itself was cancelled, or ended as the caller was
                raise
            cancelled = cancelled or exc
            continue
        if cancelled is not None:
            raise cancelled
        return result

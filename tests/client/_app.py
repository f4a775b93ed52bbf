"""A small Starlette app that throttles on purpose, for the client tests.

``/throttle/{name}?n=N&status=429&h=Name:Value`` answers ``status`` (429 by
default) with the ``h`` headers N times for ``name``, then 200. Every attempt is
recorded (method, Idempotency-Key, body), so tests can see what the client sent.

``/gate/{group}?size=S&retry_after=1`` holds the first request of each client
(``X-Client`` header) until S clients have arrived, answers them all 429 with
``Retry-After`` at the same instant, and 200 afterwards: the worst case for
synchronised retries.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

GATE_TIMEOUT_S = 30.0


@dataclass
class Attempt:
    method: str
    idempotency_key: str | None
    body: bytes
    at: float


@dataclass
class ThrottleState:
    attempts: dict[str, list[Attempt]] = field(default_factory=lambda: defaultdict(list))
    gate_arrivals: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    released_at: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def build_app(state: ThrottleState) -> Starlette:
    """The throttling app over ``state``."""

    async def throttle(request: Request) -> Response:
        name = request.path_params["name"]
        attempt = Attempt(
            request.method,
            request.headers.get("idempotency-key"),
            await request.body(),
            time.monotonic(),
        )
        with state.lock:
            state.attempts[name].append(attempt)
            count = len(state.attempts[name])
        if count <= int(request.query_params.get("n", "1")):
            headers = dict(h.split(":", 1) for h in request.query_params.getlist("h"))
            status = int(request.query_params.get("status", "429"))
            return Response(b"slow down", status, headers=headers)
        return JSONResponse({"attempts": count})

    async def gate(request: Request) -> Response:
        group = request.path_params["group"]
        client = request.headers["x-client"]
        size = int(request.query_params["size"])
        event = state.gates.setdefault(group, asyncio.Event())
        if client in state.gate_arrivals[group]:
            return JSONResponse({"ok": True})
        state.gate_arrivals[group].add(client)
        if len(state.gate_arrivals[group]) >= size:
            state.released_at[group] = time.monotonic()
            event.set()
        await asyncio.wait_for(event.wait(), GATE_TIMEOUT_S)
        retry_after = request.query_params.get("retry_after", "1")
        return Response(b"slow down", 429, headers={"Retry-After": retry_after})

    return Starlette(
        routes=[
            Route("/throttle/{name}", throttle, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
            Route("/gate/{group}", gate),
        ]
    )

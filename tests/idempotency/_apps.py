"""Apps that count how often they really run, for the idempotency middleware tests.

``/orders/{name}`` creates an "order" and counts executions per name. Query
``mode``: ``slow`` holds the handler until the test releases it, ``crash``
raises, ``error`` answers 500, ``big`` answers 5,000 bytes. The "lossy gateway"
wrappers stand for a proxy that lost a response: the first request per path
sent with ``X-Lose-Response: 1`` runs the app behind it, the response is
dropped, and the client gets a 503.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from flask import Flask, jsonify
from flask import request as flask_request
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

HOLD_S = 5.0

R = TypeVar("R")


@dataclass
class Orders:
    executed: Counter[str] = field(default_factory=Counter)
    in_handler: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, name: str) -> int:
        with self.lock:
            self.executed[name] += 1
            return self.executed[name]

    def duplicate_while_held(self, send: Callable[[], R]) -> tuple[R, R]:
        """``send()`` a ``mode=slow`` request on a thread and, while its handler is held,
        once more on this one; then release the handler: (first response, duplicate's)."""
        self.in_handler.clear()
        self.release.clear()
        first: list[R] = []
        worker = threading.Thread(target=lambda: first.append(send()))
        worker.start()
        try:
            assert self.in_handler.wait(5)
            duplicate = send()
        finally:
            self.release.set()
            worker.join(10)
        return first[0], duplicate


def starlette_orders(orders: Orders) -> Starlette:
    """The orders endpoint as a Starlette app."""

    async def create(request: Request) -> Response:
        name = request.path_params["name"]
        body = await request.body()
        number = orders.run(name)
        mode = request.query_params.get("mode")
        if mode == "slow":
            orders.in_handler.set()
            await asyncio.to_thread(orders.release.wait, HOLD_S)
        elif mode == "crash":
            raise RuntimeError("the handler crashed")
        elif mode == "error":
            return JSONResponse({"failed": number}, 500)
        elif mode == "big":
            return Response(b"x" * 5000)
        return JSONResponse({"order": number, "body": body.decode()}, 201)

    return Starlette(routes=[Route("/orders/{name}", create, methods=["GET", "POST", "PATCH"])])


def flask_orders(orders: Orders) -> Flask:
    """The orders endpoint as a Flask app."""
    app = Flask("orders")

    @app.route("/orders/<name>", methods=["GET", "POST", "PATCH"])
    def create(name: str) -> Any:
        body = flask_request.get_data()
        number = orders.run(name)
        if flask_request.args.get("mode") == "slow":
            orders.in_handler.set()
            orders.release.wait(HOLD_S)
        return jsonify(order=number, body=body.decode()), 201

    return app


class LossyGateway:
    """ASGI: the first X-Lose-Response request per path runs, but its response is lost."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lost: set[str] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        lose = scope["type"] == "http" and (b"x-lose-response", b"1") in scope["headers"]
        if not lose or scope["path"] in self.lost:
            return await self.app(scope, receive, send)
        self.lost.add(scope["path"])

        async def drop(message: Any) -> None:
            return None

        await self.app(scope, receive, drop)
        await send({"type": "http.response.start", "status": 503, "headers": []})
        await send({"type": "http.response.body", "body": b"upstream response lost"})


class WSGILossyGateway:
    """WSGI twin of LossyGateway."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lost: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ["PATH_INFO"]
        with self.lock:
            first = environ.get("HTTP_X_LOSE_RESPONSE") == "1" and path not in self.lost
            self.lost.add(path)
        if not first:
            return self.app(environ, start_response)
        result = self.app(environ, lambda status, headers, exc_info=None: None)
        try:
            for _ in result:
                pass
        finally:
            getattr(result, "close", lambda: None)()
        start_response("503 Service Unavailable", [("Content-Length", "22")])
        return [b"upstream response lost"]

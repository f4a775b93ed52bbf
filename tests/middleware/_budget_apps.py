"""The Flask app and the budget the WSGI token budget tests share.

The budget is a real ``TokenBudget`` that also keeps what each settlement was asked to
settle (``Recording``), so that "settled exactly once, with this usage" can be seen.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, request

from ratewarden.budgets import Reservation, TokenBudget, Usage
from ratewarden.limiter import Flow
from ratewarden.middleware import RequestInfo, WSGITokenBudgetMiddleware, by_api_key

LIMITS = {"requests": "100/minute", "tokens": "10000/minute"}
KEY = {"x-api-key": "tenant-a"}
#: What a request without a body is estimated to use (a HEAD, a GET).
NO_BODY = Usage.of(1500, 0)


class Recording(TokenBudget):
    """A TokenBudget that keeps the usage each settlement was asked for (and settles it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settled: list[Usage] = []
        self.settled_event = threading.Event()

    def settle_usage_flow(self, reservation: Reservation, actual: Usage) -> Flow[Any]:
        self.settled.append(actual)
        found = yield from super().settle_usage_flow(reservation, actual)
        self.settled_event.set()
        return found

    def tokens_left(self) -> int:
        return self.peek("budget:key:" + hashed("tenant-a")).axis("tokens").remaining


def hashed(api_key: str) -> str:
    found = by_api_key()(RequestInfo("GET", "/", None, {"x-api-key": api_key}, {}))
    assert found is not None
    return found.removeprefix("key:")


def estimate(request: RequestInfo, body: bytes) -> Usage:
    if not body:
        return NO_BODY
    asked = json.loads(body)
    return Usage.of(asked["prompt_tokens"], asked["max_tokens"])


def ask(prompt: int, max_tokens: int, reply: int, **extra: object) -> dict[str, object]:
    return {"prompt_tokens": prompt, "max_tokens": max_tokens, "reply_tokens": reply, **extra}


@dataclass
class Actual:
    """``actual``: what the streaming endpoint left in the environ, and how often it was asked."""

    calls: list[Sequence[tuple[str, str]]] = field(default_factory=list)

    def __call__(self, request: RequestInfo, headers: Sequence[tuple[str, str]]) -> int | None:
        self.calls.append(headers)
        used = request.raw.get("tokens_used")
        return used if isinstance(used, int) else None


@dataclass
class Served:
    """The Flask app behind the middleware, its budget, and what the endpoints saw."""

    app: Flask
    budget: Recording
    calls: list[str]
    bodies: list[bytes]

    def client(self) -> Any:
        return self.app.test_client()


def flask_app(budget: Recording, **options: Any) -> Served:
    app = Flask(__name__)
    app.config["PROPAGATE_EXCEPTIONS"] = True  # an app that raises reaches the middleware
    calls: list[str] = []
    bodies: list[bytes] = []

    @app.post("/v1/chat")
    def chat() -> Response:
        bodies.append(request.get_data())
        asked = json.loads(bodies[-1])
        calls.append("chat")
        used = asked["prompt_tokens"] + asked["reply_tokens"]
        headers = {} if asked.get("silent") else {"x-tokens-used": str(asked.get("report", used))}
        return Response(json.dumps({"total_tokens": used}), headers=headers)

    @app.post("/v1/stream")
    def stream() -> Response:
        asked = request.get_json()
        calls.append("stream")
        bodies.append(request.get_data())
        environ = request.environ

        def tokens() -> Iterator[bytes]:
            for i in range(asked["reply_tokens"] // 100):
                if i == asked.get("fail_at"):
                    raise RuntimeError("the model went away")
                yield b"tok "
            environ["tokens_used"] = asked["prompt_tokens"] + asked["reply_tokens"]

        return Response(tokens())

    @app.post("/v1/fail")
    def fail() -> str:
        calls.append("fail")
        raise RuntimeError("the endpoint failed")

    @app.get("/v1/models")
    def models() -> dict[str, list[str]]:
        calls.append("models")
        return {"models": []}

    @app.get("/health")
    def health() -> str:
        return "ok"

    options = {"key": by_api_key(), "estimate": estimate, "read_body": True, **options}
    options.setdefault("paths", ["/v1/**"])
    app.wsgi_app = WSGITokenBudgetMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, budget=budget, **options
    )
    return Served(app, budget, calls, bodies)

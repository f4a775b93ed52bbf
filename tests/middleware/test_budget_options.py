"""What the token budget middlewares (ASGI and WSGI) share, checked on both: every option,
the budget of the right flavour, and an estimate that returns nonsense."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from ratewarden import AsyncMemoryStore, ConfigurationError, MemoryStore
from ratewarden.budgets import AsyncTokenBudget, TokenBudget
from ratewarden.middleware import TokenBudgetMiddleware, WSGITokenBudgetMiddleware
from tests.middleware._budget_apps import (
    KEY,
    LIMITS,
    Recording,
    ask,
    estimate,
    flask_app,
)


def _asgi_app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("never called: these tests build middlewares")


def _wsgi_app(environ: Any, start_response: Any) -> list[bytes]:
    raise AssertionError("never called: these tests build middlewares")


#: Each flavour: how to build it with options added, and a budget of the other flavour.
FLAVOURS: dict[str, tuple[Callable[..., Any], Callable[[], Any]]] = {
    "asgi": (
        lambda **o: TokenBudgetMiddleware(
            _asgi_app,
            **{"budget": AsyncTokenBudget(AsyncMemoryStore(), LIMITS, max_output_tokens=9), **o},
        ),
        lambda: TokenBudget(MemoryStore(), LIMITS, max_output_tokens=9),
    ),
    "wsgi": (
        lambda **o: WSGITokenBudgetMiddleware(
            _wsgi_app, **{"budget": TokenBudget(MemoryStore(), LIMITS, max_output_tokens=9), **o}
        ),
        lambda: AsyncTokenBudget(AsyncMemoryStore(), LIMITS, max_output_tokens=9),
    ),
}

#: A bad value of each option, and what the refusal says.
BAD_OPTIONS = [
    ("budget", object(), "budget <object"),
    ("estimate", 3, "estimate=3: a callable"),
    ("actual", "tokens", "actual='tokens': a callable"),
    ("usage_header", " ", "usage_header ' ' must be a header name"),
    ("usage_header", b"x-used", "usage_header b'x-used' must be a header name"),
    ("max_body", -1, "max_body -1 must be a byte count"),
    ("max_body", 1.5, "max_body 1.5 must be a byte count"),
    ("key", "api-key", "key='api-key': a key extractor"),
    ("name", "two words", "name 'two words' must be"),
    ("paths", 3, "paths=3: a path pattern or several"),
    ("paths", ["v1/**"], "path pattern 'v1/\\*\\*' must be a string starting with '/'"),
    ("methods", 3, "methods=3: a method name or several"),
    ("methods", ["GET POST"], "methods: 'GET POST' is not a method name"),
    ("fallback", "", "fallback='': a non-empty string"),
    ("failure_mode", "shut", "failure_mode 'shut' must be one of open, closed"),
    ("metrics", "prometheus", "metrics 'prometheus' must be a Metrics"),
    ("clock", 3, "clock=3 is not a ratewarden.clock.Clock"),
]


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
@pytest.mark.parametrize(("option", "value", "said"), BAD_OPTIONS)
def test_every_bad_option_is_refused_by_name(
    flavour: str, option: str, value: object, said: str
) -> None:
    """Each bad option is a ConfigurationError naming it, on ASGI and WSGI alike (one check)."""
    build, _ = FLAVOURS[flavour]
    with pytest.raises(ConfigurationError, match=said):
        build(**{"estimate": estimate, option: value})


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_the_other_flavour_s_budget_is_refused_naming_the_right_one(flavour: str) -> None:
    """An AsyncTokenBudget on WSGI (or a TokenBudget on ASGI) is refused, saying which
    budget goes with which middleware."""
    build, other = FLAVOURS[flavour]
    wanted = "an AsyncTokenBudget" if flavour == "asgi" else "a TokenBudget"
    with pytest.raises(ConfigurationError, match=f"must be {wanted} .*goes with"):
        build(estimate=estimate, budget=other())


async def test_an_estimate_that_is_not_a_count_names_itself_on_both() -> None:
    """An estimate returning nonsense is a ConfigurationError saying so, on Flask and on
    FastAPI, and nothing is reserved."""
    flask_budget = Recording(MemoryStore(), LIMITS, max_output_tokens=9)
    served = flask_app(flask_budget, estimate=lambda request, body: "many")
    with pytest.raises(ConfigurationError, match="estimate returned 'many'"):
        served.client().post("/v1/chat", json=ask(1, 1, 1), headers=KEY)
    assert served.calls == []
    fastapi = FastAPI()
    fastapi.add_middleware(
        TokenBudgetMiddleware,
        budget=AsyncTokenBudget(AsyncMemoryStore(), LIMITS, max_output_tokens=9),
        estimate=lambda request, body: "many",
    )
    transport = httpx.ASGITransport(app=fastapi)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        with pytest.raises(ConfigurationError, match="estimate returned 'many'"):
            await client.get("/")

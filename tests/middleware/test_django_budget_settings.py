"""``DjangoTokenBudgetMiddleware``'s setting, ``RATEWARDEN_TOKEN_BUDGET``: dotted paths, every bad
value refused by name when Django builds its middleware, and the budget that fits the mode
Django picks, refused by name when it does not fit.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.test.utils import override_settings

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncMemoryStore, ConfigurationError, MemoryStore
from ratewarden.budgets import AsyncTokenBudget, TokenBudget
from ratewarden.middleware import django_budget
from ratewarden.middleware._budget import TokenBudgetBase
from ratewarden.middleware.django_budget import DjangoTokenBudgetMiddleware
from tests.middleware._budget_apps import LIMITS

BUDGET = "ratewarden.middleware.django_budget.DjangoTokenBudgetMiddleware"
URLS = "tests.middleware.test_django_budget"
SYNC_ONLY = "tests.middleware.test_django_shedding_settings.SyncOnly"
SIGNED_IN = "tests.middleware.test_django_middleware.SignedIn"

#: Objects the settings name by dotted path.
SMALL = TokenBudget(MemoryStore(), {"tokens": "10/minute"}, max_output_tokens=10)
SYNC = TokenBudget(MemoryStore(), LIMITS, max_output_tokens=4000)
ASYNC = AsyncTokenBudget(AsyncMemoryStore(), LIMITS, max_output_tokens=4000)


def eleven(request: Any, body: bytes) -> int:
    return 11


def _settings(setting: object, middleware: list[str] | None = None) -> override_settings:
    return override_settings(
        ROOT_URLCONF=URLS, MIDDLEWARE=middleware or [BUDGET], RATEWARDEN_TOKEN_BUDGET=setting
    )


def test_dotted_paths_name_the_budget_and_the_estimate() -> None:
    """``budget`` and ``estimate`` given as dotted paths are imported: 11 tokens never fit a
    budget of 10, so the request is refused before the view."""
    setting = {"budget": f"{__name__}.SMALL", "estimate": f"{__name__}.eleven", "name": "llm"}
    with _settings(setting):
        refused = Client().get("/v1/chat")
    assert refused.status_code == 429
    assert "Token budget 'llm' exceeded" in refused.json()["detail"]


def _est(request: Any, body: bytes) -> int:
    return 1


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        (None, "needs the Django setting RATEWARDEN_TOKEN_BUDGET, a dict with 'budget' and"),
        ({"estimate": _est}, "RATEWARDEN_TOKEN_BUDGET needs 'budget' (an object or its dotted"),
        ({"budget": SYNC}, "RATEWARDEN_TOKEN_BUDGET needs 'estimate'"),
        ({"budget": SYNC, "estimate": _est, "store": 1}, "unknown keys ['store']"),
        ({"budget": SYNC, "estimate": _est, "failure": "open"}, "unknown keys ['failure']"),
        ({"budget": "tests.nowhere.B", "estimate": _est}, "['budget']: cannot import 'tests."),
        ({"budget": SYNC, "estimate": "tests.nowhere.e"}, "['estimate']: cannot import"),
        ({"budget": 3, "estimate": _est}, "RATEWARDEN_TOKEN_BUDGET['budget'] is 3: a TokenBudget"),
        (
            {"budget": SYNC, "estimate": 1},
            "RATEWARDEN_TOKEN_BUDGET: token budget middleware estimate=1: a callable",
        ),
        (
            {"budget": SYNC, "estimate": _est, "max_body": -1},
            "RATEWARDEN_TOKEN_BUDGET: max_body -1 must be a byte count >= 0",
        ),
        (
            {"budget": SYNC, "estimate": _est, "usage_header": " "},
            "RATEWARDEN_TOKEN_BUDGET: usage_header ' ' must be a header name",
        ),
        (
            {"budget": SYNC, "estimate": _est, "failure_mode": "local"},
            "RATEWARDEN_TOKEN_BUDGET: the middleware's failure_mode is 'open' or 'closed'",
        ),
    ],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_bad_setting_is_refused_by_name(setting: Any, says: str, mode: str) -> None:
    """In either mode (the get_response Django hands it), each bad value is a
    ConfigurationError naming the setting and the value."""

    async def awaited(request: HttpRequest) -> HttpResponse:
        return HttpResponse("never")

    if mode == "async" and isinstance(setting, dict) and setting.get("budget") is SYNC:
        setting = {**setting, "budget": ASYNC}
    with _settings(setting), pytest.raises(ConfigurationError) as caught:
        DjangoTokenBudgetMiddleware(awaited if mode == "async" else lambda r: HttpResponse("x"))
    assert says in str(caught.value)


ASYNC_REFUSAL = (
    "RATEWARDEN_TOKEN_BUDGET['budget'] is {budget!r}, a TokenBudget, whose reserve blocks, and "
    "Django runs DjangoTokenBudgetMiddleware in async mode here (the ASGI handler, with only "
    "async-capable middleware after it): use an AsyncTokenBudget (over an AsyncStore such as "
    "AsyncRedisStore), which it awaits on the event loop"
)
SYNC_REFUSAL = (
    "RATEWARDEN_TOKEN_BUDGET['budget'] is {budget!r}, an AsyncTokenBudget, whose reserve is "
    "awaited, and Django runs DjangoTokenBudgetMiddleware in sync mode here (the WSGI handler, "
    "or a synchronous-only middleware listed after it): use a TokenBudget (over a Store such as "
    "RedisStore), or serve under ASGI with only async-capable middleware after it"
)


def test_a_blocking_budget_is_refused_in_async_mode() -> None:
    """Django's ASGI handler refuses to build the chain, naming the setting and the budget."""
    with (
        _settings({"budget": SYNC, "estimate": _est}),
        pytest.raises(ConfigurationError) as caught,
    ):
        ASGIHandler()
    assert str(caught.value) == ASYNC_REFUSAL.format(budget=SYNC)


@pytest.mark.parametrize("under", ["wsgi", "asgi-sync-only-after"])
def test_an_awaited_budget_is_refused_in_sync_mode(under: str) -> None:
    """Django's WSGI (test) handler, or ASGI with a synchronous-only middleware after it."""
    stack = [BUDGET] if under == "wsgi" else [BUDGET, SYNC_ONLY]
    with (
        _settings({"budget": ASYNC, "estimate": _est}, stack),
        pytest.raises(ConfigurationError) as caught,
    ):
        if under == "wsgi":
            Client().get("/v1/chat")
        else:
            ASGIHandler()
    assert str(caught.value) == SYNC_REFUSAL.format(budget=ASYNC)


def test_the_setting_takes_every_keyword_of_the_token_budget_middlewares() -> None:
    """The setting's keys are the middlewares' keywords, but the app and the deprecated
    ``failure``."""
    keywords = set(inspect.signature(TokenBudgetBase).parameters) - {"app", "failure"}
    assert set(django_budget._KEYS) == keywords


def test_the_docs_example_budgets_each_signed_in_user() -> None:
    """docs/middleware.md's Django token budget example, run as written: its budget, estimate
    and key, as the setting, behind a signing-in middleware: a prompt of 4,000 characters is
    estimated at 1,000 tokens in and 4,096 out, reserved on user 7's budget of 100,000 (the
    response says so), and user 8's budget is untouched."""
    page = Path(__file__).resolve().parents[2] / "docs" / "middleware.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    (at,) = [i for i, b in enumerate(blocks) if "RATEWARDEN_TOKEN_BUDGET = {" in b]
    block = blocks[at] + blocks[at + 1]  # settings.py, then the module its paths name
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(block, str(page), "exec"), namespace)
    assert namespace["MIDDLEWARE"][-1] == BUDGET
    setting = {**namespace["RATEWARDEN_TOKEN_BUDGET"], "paths": ["/v1/chat"]}
    setting.update({key: namespace[key] for key in ("budget", "estimate")})
    setting["key"] = namespace["per_user"]
    sent = json.dumps({"prompt": "x" * 4000, "reply_tokens": 0, "prompt_tokens": 0})
    with _settings(setting, [SIGNED_IN, BUDGET]):
        response = Client().post(
            "/v1/chat?quiet", sent, content_type="application/json", headers={"X-Test-User": "7"}
        )
    budget = namespace["budget"]
    estimated = namespace["estimate"](None, sent.encode())
    assert (estimated.input_tokens, estimated.amount("tokens")) == (1000, 5096)
    assert response.status_code == 200 and response["x-ratelimit-limit-tokens"] == "100000"
    assert int(response["x-ratelimit-remaining-tokens"]) < 100000 - 4096
    assert budget.peek("budget:user:7").axis("tokens").remaining < 100000 - 4096
    assert budget.peek("budget:user:8").axis("tokens").remaining == 100000

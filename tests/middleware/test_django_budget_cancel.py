"""``DjangoTokenBudgetMiddleware`` in async mode settles even when Django cancels the request.

Django's ASGI handler cancels the request's task when the client goes away (it listens
for ``http.disconnect`` beside it). A cancellation that lands while the middleware
settles cut the store call: on a real redis-server whose scripts were just flushed (a
restart, a failover), the settlement's second round trip (loading the script again) never
happened, and the estimate stayed charged although the view said it used less.

Here the view itself flushes the scripts and has its task cancelled as it returns, so the
cancellation lands in the middleware's settlement, as a client leaving right then does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import AsyncClient
from django.test.utils import override_settings
from django.urls import path

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden.budgets import AsyncTokenBudget
from ratewarden.middleware import by_api_key
from ratewarden.storage.redis import AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.middleware._budget_apps import KEY, LIMITS, ask, estimate, hashed

pytestmark = pytest.mark.timeout(60)

BUDGET = "ratewarden.middleware.django_budget.DjangoTokenBudgetMiddleware"
#: The redis-server whose scripts the view flushes (set by the test).
SERVER: list[RedisServer] = []


async def used_30_then_left(request: HttpRequest) -> HttpResponse:
    """Reports 30 tokens used; the scripts are flushed and the client goes as it returns."""
    SERVER[0].client().script_flush()
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    response = JsonResponse({"text": "..."})
    response["x-tokens-used"] = "30"
    return response


urlpatterns = [path("v1/chat", used_30_then_left)]


@pytest.fixture
def server(redis_server: RedisServer) -> Iterator[RedisServer]:
    redis_server.client().flushall()
    SERVER.append(redis_server)
    yield redis_server
    SERVER.clear()


async def test_a_cancel_during_the_settlement_does_not_cut_it(server: RedisServer) -> None:
    """4,000 reserved, 30 used: the settlement is made through the cancellation (6,000 ->
    9,970 left), and the cancellation still reaches the handler."""
    store = AsyncRedisStore.from_url(server.url, clock=ManualClock(), timeout=2.0)
    budget = AsyncTokenBudget(store, LIMITS, max_output_tokens=4000)
    options = {"budget": budget, "estimate": estimate, "key": by_api_key(), "read_body": True}
    with (
        override_settings(
            ROOT_URLCONF=__name__,
            ALLOWED_HOSTS=["*"],
            MIDDLEWARE=[BUDGET],
            RATEWARDEN_TOKEN_BUDGET=options,
        ),
        pytest.raises(asyncio.CancelledError),
    ):
        await AsyncClient().post(
            "/v1/chat", ask(1000, 3000, 30), content_type="application/json", headers=KEY
        )
    left = await budget.peek("budget:key:" + hashed("tenant-a"))
    assert left.axis("tokens").remaining == 9970

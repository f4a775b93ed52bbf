"""IdempotencyMiddleware (ASGI) around Django's own ASGI handler, under a real uvicorn."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from django.conf import settings

from tests._django import configure_django

if not settings.configured:
    configure_django()

from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, JsonResponse
from django.test.utils import override_settings
from django.urls import path

from ratewarden.middleware.idempotency import IdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncMemoryIdempotencyStore
from tests.client._live import LiveASGI

executed: list[bytes] = []


def pay(request: HttpRequest) -> JsonResponse:
    """Counts its runs; answers 201 with the payment number and the body it got."""
    executed.append(request.body)
    return JsonResponse({"payment": len(executed), "body": request.body.decode()}, status=201)


async def refund(request: HttpRequest) -> JsonResponse:
    """An async view: counts its runs the same way."""
    executed.append(request.body)
    return JsonResponse({"refund": len(executed)}, status=200)


urlpatterns = [path("pay", pay), path("refund", refund)]


@pytest.fixture(scope="module")
def server() -> Iterator[LiveASGI]:
    """Django's ASGI handler behind the middleware, on loopback."""
    with override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"]):
        live = LiveASGI(IdempotencyMiddleware(ASGIHandler(), AsyncMemoryIdempotencyStore()))
        yield live
        live.stop()


@pytest.mark.parametrize("view", ["pay", "refund"])
def test_django_asgi_runs_once_and_replays(server: LiveASGI, view: str) -> None:
    """A sync view and an async view: the retry with the same key replays the first answer
    without running the view, and the same key with another body is refused with 422."""
    executed.clear()
    key = f"{view}-1"
    with httpx.Client(base_url=server.url, timeout=5.0) as client:

        def post(body: bytes) -> httpx.Response:
            return client.post(f"/{view}", content=body, headers={"Idempotency-Key": key})

        first, retry, reused = post(b"10 EUR"), post(b"10 EUR"), post(b"99 EUR")
    assert first.status_code == retry.status_code
    assert first.status_code in (200, 201)
    assert retry.json() == first.json()
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert reused.status_code == 422
    assert executed == [b"10 EUR"]


def test_django_asgi_without_a_key_runs_every_time(server: LiveASGI) -> None:
    """No Idempotency-Key: the middleware stays out of the way and the view runs each time."""
    executed.clear()
    with httpx.Client(base_url=server.url, timeout=5.0) as client:
        answers = [client.post("/pay", content=b"1 EUR") for _ in range(2)]
    assert [a.json()["payment"] for a in answers] == [1, 2]
    assert executed == [b"1 EUR", b"1 EUR"]

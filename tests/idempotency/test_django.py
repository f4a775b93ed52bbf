"""WSGIIdempotencyMiddleware around Django's own WSGI handler, in-process."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from tests._django import configure_django

if not settings.configured:
    configure_django()

from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, JsonResponse
from django.test.utils import override_settings
from django.urls import path
from werkzeug.test import Client

from ratewarden.middleware.idempotency import WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import MemoryIdempotencyStore

executed: list[bytes] = []


def pay(request: HttpRequest) -> JsonResponse:
    """Counts its runs; answers 201 with the payment number and the body it got."""
    executed.append(request.body)
    return JsonResponse({"payment": len(executed), "body": request.body.decode()}, status=201)


urlpatterns = [path("pay", pay)]


@override_settings(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"])
def test_django_payment_runs_once_and_is_replayed() -> None:
    """The retry replays the first 201 (body re-read by Django from the buffered input)."""
    executed.clear()
    client = Client(WSGIIdempotencyMiddleware(WSGIHandler(), MemoryIdempotencyStore()))

    def post(body: bytes) -> Any:
        response = client.post("/pay", data=body, headers={"Idempotency-Key": "pay-1"})
        response.get_data()
        return response

    first, retry, reused = post(b"10 EUR"), post(b"10 EUR"), post(b"99 EUR")
    assert first.status_code == retry.status_code == 201
    assert retry.get_json() == first.get_json() == {"payment": 1, "body": "10 EUR"}
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert reused.status_code == 422
    assert executed == [b"10 EUR"]

"""``DjangoSheddingMiddleware``'s setting, ``RATEWARDEN_SHEDDING``: dotted paths, every bad
value refused by name when Django builds its middleware, and the shedder that fits the mode
Django picks (sync: the WSGI handler, or a synchronous-only middleware after it; async: the
ASGI handler), refused by name when it does not fit.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, Client
from django.test.utils import override_settings

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.budgets import AsyncFleetShedder, FleetShedder, LoadShedder
from ratewarden.middleware.django_shedding import DjangoSheddingMiddleware

SHEDDING = "ratewarden.middleware.django_shedding.DjangoSheddingMiddleware"
URLS = "tests.middleware.test_django_shedding"

#: Objects the settings name by dotted path.
FULL = LoadShedder(lambda: 1.0)
FLEET = FleetShedder(Limiter(MemoryStore()), "api", 10)
ASYNC_FLEET = AsyncFleetShedder(AsyncLimiter(AsyncMemoryStore()), "api", 10)


#: How a value the shedding core refuses is named.
BUILT = "RATEWARDEN_SHEDDING: load shedding middleware "


def batch(request: Any) -> str:
    return "batch"


class SyncOnly:
    """A synchronous-only middleware: listed after the shedder, it puts it in sync mode."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)


def _settings(setting: object, middleware: list[str] | None = None) -> override_settings:
    return override_settings(
        ROOT_URLCONF=URLS, MIDDLEWARE=middleware or [SHEDDING], RATEWARDEN_SHEDDING=setting
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_dotted_paths_name_the_shedder_and_the_classifier(mode: str) -> None:
    """``shedder`` and ``classify`` given as dotted paths are imported: every request is
    batch and shed at full load; ``status`` and ``retry_after`` are taken as given."""
    setting = {
        "shedder": f"{__name__}.FULL",
        "classify": f"{__name__}.batch",
        "status": 429,
        "retry_after": 5,
    }
    with _settings(setting):
        if mode == "sync":
            response = Client().get("/quick", headers={"x-priority": "critical"})
        else:
            response = await AsyncClient().get("/quick", headers={"x-priority": "critical"})
    assert (response.status_code, response["Retry-After"]) == (429, "5")
    assert response.json()["traffic_class"] == "batch"


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        (None, "needs the Django setting RATEWARDEN_SHEDDING, a dict with 'shedder'"),
        ({}, "RATEWARDEN_SHEDDING needs 'shedder' (an object or its dotted path)"),
        ({"shedder": FULL, "store": 1}, "RATEWARDEN_SHEDDING has unknown keys ['store']"),
        ({"shedder": "tests.nowhere.SHEDDER"}, "['shedder']: cannot import 'tests.nowhere."),
        ({"shedder": FULL, "classify": "tests.nowhere.f"}, "['classify']: cannot import"),
        ({"shedder": 3}, "RATEWARDEN_SHEDDING['shedder'] is 3: a FleetShedder (sync mode), an"),
        (
            {"shedder": FULL, "status": 200},
            f"{BUILT}status=200: 503 (overloaded) or 429",
        ),
        (
            {"shedder": FULL, "default": "vip"},
            f"{BUILT}default class 'vip' is not a class",
        ),
        ({"shedder": FULL, "retry_after": -1}, "retry_after=-1: a whole number >= 0"),
        (
            {"shedder": FULL, "failure_mode": "local"},
            "RATEWARDEN_SHEDDING: the middleware's failure_mode is 'open' or 'closed'",
        ),
        (
            {"shedder": FULL, "metrics": 1},
            "RATEWARDEN_SHEDDING: load shedding middleware: metrics 1 must be",
        ),
        ({"shedder": FULL, "classify": 1}, "classify=1: a callable of the request"),
    ],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_bad_setting_is_refused_by_name(setting: object, says: str, mode: str) -> None:
    """In either mode (the get_response Django hands it), each bad value is a
    ConfigurationError naming the setting and the value."""

    async def awaited(request: HttpRequest) -> HttpResponse:
        return HttpResponse("never")

    with _settings(setting), pytest.raises(ConfigurationError) as caught:
        DjangoSheddingMiddleware(awaited if mode == "async" else lambda r: HttpResponse("never"))
    assert says in str(caught.value)


ASYNC_REFUSAL = (
    "RATEWARDEN_SHEDDING['shedder'] is {shedder!r}, a FleetShedder, whose acquire blocks, and "
    "Django runs DjangoSheddingMiddleware in async mode here (the ASGI handler, with only "
    "async-capable middleware after it): use an AsyncFleetShedder (over an AsyncLimiter), "
    "which it awaits on the event loop, or a LoadShedder"
)
SYNC_REFUSAL = (
    "RATEWARDEN_SHEDDING['shedder'] is {shedder!r}, an AsyncFleetShedder, whose acquire is "
    "awaited, and Django runs DjangoSheddingMiddleware in sync mode here (the WSGI handler, or "
    "a synchronous-only middleware listed after it): use a FleetShedder (over a Limiter) or a "
    "LoadShedder, or serve under ASGI with only async-capable middleware after it"
)


def test_a_blocking_fleet_shedder_is_refused_in_async_mode() -> None:
    """Django's ASGI handler refuses to build the chain: the message names the setting, the
    shedder and what to use instead."""
    with _settings({"shedder": FLEET}), pytest.raises(ConfigurationError) as caught:
        ASGIHandler()
    assert str(caught.value) == ASYNC_REFUSAL.format(shedder=FLEET)


@pytest.mark.parametrize("under", ["wsgi", "asgi-sync-only-after"])
def test_an_awaited_fleet_shedder_is_refused_in_sync_mode(under: str) -> None:
    """Django's WSGI (test) handler, or ASGI with a synchronous-only middleware after it."""
    stack = [SHEDDING] if under == "wsgi" else [SHEDDING, f"{__name__}.SyncOnly"]
    with _settings({"shedder": ASYNC_FLEET}, stack), pytest.raises(ConfigurationError) as caught:
        if under == "wsgi":
            Client().get("/quick")
        else:
            ASGIHandler()
    assert str(caught.value) == SYNC_REFUSAL.format(shedder=ASYNC_FLEET)


async def test_a_sync_only_middleware_after_it_takes_a_blocking_fleet_shedder() -> None:
    """Under ASGI, a synchronous-only middleware after it puts it in sync mode: a FleetShedder
    fits there, and sheds (batch over a capacity of 10 held by 6 critical leases)."""
    shedder = FleetShedder(Limiter(MemoryStore()), "api", 10)
    leases = [shedder.acquire("critical")[1] for _ in range(6)]
    stack = [SHEDDING, f"{__name__}.SyncOnly"]
    setting = {"shedder": shedder, "classify": batch}
    with _settings(setting, stack):
        response = await AsyncClient().get("/quick")
    for lease in leases:
        shedder.release(lease)
    assert response.status_code == 503


def test_the_docs_example_s_shedder_and_classify_shed_an_export() -> None:
    """docs/middleware.md's Django example, run as written: its objects, as the setting, shed
    a ``?export`` request (batch) with 24 of the 40 slots taken and admit a plain one."""
    page = Path(__file__).resolve().parents[2] / "docs" / "middleware.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    (at,) = [i for i, b in enumerate(blocks) if "RATEWARDEN_SHEDDING = {" in b]
    block = blocks[at] + blocks[at + 1]  # settings.py, then the module its paths name
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(block, str(page), "exec"), namespace)
    assert namespace["MIDDLEWARE"][0] == SHEDDING
    shedder = namespace["shedder"]
    leases = [shedder.acquire("critical")[1] for _ in range(24)]
    setting = {**namespace["RATEWARDEN_SHEDDING"]}
    setting.update(shedder=shedder, classify=namespace["classify"], paths=["/quick"])
    with _settings(setting):
        client = Client()
        codes = [client.get("/quick?export").status_code, client.get("/quick").status_code]
    for lease in leases:
        shedder.release(lease)
    assert codes == [503, 200]

"""``DjangoConcurrencyMiddleware``'s setting, ``RATEWARDEN_CONCURRENCY``: dotted paths, every bad
value refused by name when Django builds its middleware, and the limiter that fits the mode
Django picks (sync: the WSGI handler, or a synchronous-only middleware after it; async: the
ASGI handler), refused by name when it does not fit.
"""

from __future__ import annotations

import inspect
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
from ratewarden.middleware import SlotPolicy, by_api_key, django_concurrency
from ratewarden.middleware.django_concurrency import DjangoConcurrencyMiddleware

CONCURRENCY = "ratewarden.middleware.django_concurrency.DjangoConcurrencyMiddleware"
URLS = "tests.middleware.test_django_shedding"
SYNC_ONLY = "tests.middleware.test_django_shedding_settings.SyncOnly"
SIGNED_IN = "tests.middleware.test_django_middleware.SignedIn"

#: Objects the settings name by dotted path.
LIMITER = Limiter(MemoryStore())
ASYNC_LIMITER = AsyncLimiter(AsyncMemoryStore())
PER_KEY = by_api_key(hashed=False)

#: How a value the concurrency core refuses is named.
BUILT = "RATEWARDEN_CONCURRENCY: concurrency middleware "


def _settings(setting: object, middleware: list[str] | None = None) -> override_settings:
    return override_settings(
        ROOT_URLCONF=URLS, MIDDLEWARE=middleware or [CONCURRENCY], RATEWARDEN_CONCURRENCY=setting
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_dotted_paths_name_the_limiter_and_the_key(mode: str) -> None:
    """``limiter`` and ``key`` given as dotted paths are imported: with the one slot of API key
    ``k1`` taken, ``k1`` is refused with ``status`` and ``retry_after`` as given, ``k2`` is
    admitted."""
    path = f"{__name__}.{'LIMITER' if mode == 'sync' else 'ASYNC_LIMITER'}"
    limiter: Any = LIMITER if mode == "sync" else ASYNC_LIMITER
    name = f"api-{mode}"
    setting = {
        "limiter": path,
        "key": f"{__name__}.PER_KEY",
        "limit": 1,
        "name": name,
        "status": 503,
        "retry_after": 5,
    }
    lease = limiter.acquire_slot(f"{name}:key:k1", 1, ttl=30)
    if mode == "async":
        lease = await lease
    with _settings(setting):
        if mode == "sync":
            client = Client()
            got = [client.get("/quick", headers={"x-api-key": k}) for k in ("k1", "k2")]
        else:
            aclient = AsyncClient()
            got = [await aclient.get("/quick", headers={"x-api-key": k}) for k in ("k1", "k2")]
    released = limiter.release_slot(lease)
    if mode == "async":
        await released
    refused, admitted = got
    assert (refused.status_code, refused["Retry-After"]) == (503, "5")
    assert refused.json()["policy"] == name
    assert admitted.status_code == 200


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        (
            None,
            "needs the Django setting RATEWARDEN_CONCURRENCY, a dict with 'limiter' and 'limit'",
        ),
        ({"limit": 2}, "RATEWARDEN_CONCURRENCY needs 'limiter' (an object or its dotted path)"),
        ({"limiter": LIMITER}, "RATEWARDEN_CONCURRENCY needs 'limit'"),
        ({"limiter": LIMITER, "limit": 2, "store": 1}, "unknown keys ['store']"),
        ({"limiter": LIMITER, "limit": 2, "failure": "open"}, "unknown keys ['failure']"),
        ({"limiter": "tests.nowhere.LIMITER", "limit": 2}, "['limiter']: cannot import 'tests."),
        ({"limiter": LIMITER, "limit": 2, "key": "tests.nowhere.k"}, "['key']: cannot import"),
        ({"limiter": 3, "limit": 2}, "RATEWARDEN_CONCURRENCY['limiter'] is 3, which has no"),
        ({"limiter": LIMITER, "limit": 0}, f"{BUILT}limit=0: a whole number >= 1"),
        ({"limiter": LIMITER, "limit": "2"}, f"{BUILT}limit='2': a whole number >= 1"),
        ({"limiter": LIMITER, "limit": 2, "ttl": 0}, f"{BUILT}ttl=0: seconds, at least 0.001"),
        ({"limiter": LIMITER, "limit": 2, "status": 200}, f"{BUILT}status=200: 429 or 503"),
        ({"limiter": LIMITER, "limit": 2, "key": 1}, f"{BUILT}key=1: a key extractor"),
        (
            {"limiter": LIMITER, "limit": 2, "failure_mode": "local"},
            "RATEWARDEN_CONCURRENCY: the middleware's failure_mode is 'open' or 'closed'",
        ),
    ],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_bad_setting_is_refused_by_name(setting: Any, says: str, mode: str) -> None:
    """In either mode (the get_response Django hands it), each bad value is a
    ConfigurationError naming the setting and the value."""

    async def awaited(request: HttpRequest) -> HttpResponse:
        return HttpResponse("never")

    if mode == "async" and isinstance(setting, dict) and setting.get("limiter") is LIMITER:
        setting = {**setting, "limiter": ASYNC_LIMITER}
    with _settings(setting), pytest.raises(ConfigurationError) as caught:
        DjangoConcurrencyMiddleware(awaited if mode == "async" else lambda r: HttpResponse("x"))
    assert says in str(caught.value)


ASYNC_REFUSAL = (
    "RATEWARDEN_CONCURRENCY['limiter'] is {limiter!r}, whose acquire_slot blocks, and Django "
    "runs DjangoConcurrencyMiddleware in async mode here (the ASGI handler, with only "
    "async-capable middleware after it): use an AsyncLimiter (over an AsyncStore such as "
    "AsyncRedisStore), which it awaits on the event loop"
)
SYNC_REFUSAL = (
    "RATEWARDEN_CONCURRENCY['limiter'] is {limiter!r}, whose acquire_slot is awaited, and "
    "Django runs DjangoConcurrencyMiddleware in sync mode here (the WSGI handler, or a "
    "synchronous-only middleware listed after it): use a Limiter (over a Store such as "
    "RedisStore), or serve under ASGI with only async-capable middleware after it"
)


def test_a_blocking_limiter_is_refused_in_async_mode() -> None:
    """Django's ASGI handler refuses to build the chain: the message names the setting, the
    limiter and what to use instead."""
    with (
        _settings({"limiter": LIMITER, "limit": 2}),
        pytest.raises(ConfigurationError) as caught,
    ):
        ASGIHandler()
    assert str(caught.value) == ASYNC_REFUSAL.format(limiter=LIMITER)


@pytest.mark.parametrize("under", ["wsgi", "asgi-sync-only-after"])
def test_an_awaited_limiter_is_refused_in_sync_mode(under: str) -> None:
    """Django's WSGI (test) handler, or ASGI with a synchronous-only middleware after it."""
    stack = [CONCURRENCY] if under == "wsgi" else [CONCURRENCY, SYNC_ONLY]
    with (
        _settings({"limiter": ASYNC_LIMITER, "limit": 2}, stack),
        pytest.raises(ConfigurationError) as caught,
    ):
        if under == "wsgi":
            Client().get("/quick")
        else:
            ASGIHandler()
    assert str(caught.value) == SYNC_REFUSAL.format(limiter=ASYNC_LIMITER)


async def test_a_sync_only_middleware_after_it_takes_a_blocking_limiter() -> None:
    """Under ASGI, a synchronous-only middleware after it puts it in sync mode: a Limiter fits
    there, and refuses a request whose one slot is taken."""
    limiter = Limiter(MemoryStore())
    lease = limiter.acquire_slot("inflight:ip:127.0.0.1", 1, ttl=30)
    with _settings({"limiter": limiter, "limit": 1}, [CONCURRENCY, SYNC_ONLY]):
        response = await AsyncClient().get("/quick")
    limiter.release_slot(lease)
    assert response.status_code == 429


def test_the_setting_takes_every_option_of_slot_policy() -> None:
    """The setting's keys are the limiter and SlotPolicy's keywords, but the deprecated
    ``failure``."""
    options = set(inspect.signature(SlotPolicy).parameters) - {"failure"}
    assert set(django_concurrency._KEYS) == {"limiter", *options}


def test_the_docs_example_counts_each_signed_in_user() -> None:
    """docs/middleware.md's Django concurrency example, run as written: its limiter and key, as
    the setting, behind a signing-in middleware: with user 7's four slots taken, user 7 is
    refused and user 8 admitted."""
    page = Path(__file__).resolve().parents[2] / "docs" / "middleware.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    (at,) = [i for i, b in enumerate(blocks) if "RATEWARDEN_CONCURRENCY = {" in b]
    block = blocks[at] + blocks[at + 1]  # settings.py, then the module its paths name
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(block, str(page), "exec"), namespace)
    assert namespace["MIDDLEWARE"][-1] == CONCURRENCY
    limiter = namespace["limiter"]
    leases = [limiter.acquire_slot("inflight:user:7", 4, ttl=30) for _ in range(4)]
    setting = {**namespace["RATEWARDEN_CONCURRENCY"]}
    setting.update(limiter=limiter, key=namespace["per_user"], paths=["/quick"])
    with _settings(setting, [SIGNED_IN, CONCURRENCY]):
        client = Client()
        codes = [client.get("/quick", headers={"X-Test-User": u}).status_code for u in "78"]
    for lease in leases:
        limiter.release_slot(lease)
    assert all(leases) and codes == [429, 200]

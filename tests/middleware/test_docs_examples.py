"""docs/middleware.md: every python example runs as written, and the apps it builds limit."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django for the Django example)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "middleware.md"
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
BLOCKS = [b for b in _BLOCK.findall(PAGE.read_text(encoding="utf-8")) if "redis" not in b.lower()]


def _run(block: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "docs_example", "print": lambda *a, **k: None}
    exec(compile(block, str(PAGE), "exec"), namespace)
    return namespace


async def _asgi_get(app: Any, path: str, method: str = "GET") -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as client:
        return await client.request(method, path)


def test_the_page_has_examples() -> None:
    """The page shows at least the four frameworks, identity, routes and shadow mode."""
    assert len(BLOCKS) >= 7


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_example_runs(index: int) -> None:
    """Each block executes on its own, imports and all."""
    _run(BLOCKS[index])


def test_starlette_example_limits_and_exempts() -> None:
    """The Starlette example sends headers on /orders and none on the exempt /health."""
    (block,) = [
        b for b in BLOCKS if "Starlette(" in b and "RateLimitMiddleware" in b and "clock" not in b
    ]
    app = _run(block)["app"]
    orders = asyncio.run(_asgi_get(app, "/orders"))
    health = asyncio.run(_asgi_get(app, "/health"))
    assert orders.status_code == 200 and "ratelimit" in orders.headers
    assert health.status_code == 200 and "ratelimit" not in health.headers


def test_fastapi_example_login_rule() -> None:
    """The FastAPI example's @limit allows five logins a minute, then 429."""
    (block,) = [b for b in BLOCKS if "FastAPI()" in b and "/login" in b]
    app = _run(block)["app"]

    async def six_logins() -> list[int]:
        return [(await _asgi_get(app, "/login", "POST")).status_code for _ in range(6)]

    assert asyncio.run(six_logins()) == [200] * 5 + [429]


def test_flask_example_limits_and_exempts() -> None:
    """The Flask example sends headers on /items and none on the exempt /health."""
    (block,) = [b for b in BLOCKS if "flask_endpoint(app)" in b]
    client = _run(block)["app"].test_client()
    assert "RateLimit" in client.get("/items").headers
    assert "RateLimit" not in client.get("/health").headers


def test_concurrency_example_streams_and_refuses_a_fifth_stream() -> None:
    """The concurrency example serves its export, and a key with 4 open streams gets a 429."""
    (block,) = [b for b in BLOCKS if "ConcurrencyMiddleware," in b]
    app = _run(block)["app"]
    limiter = app.user_middleware[0].kwargs["limiter"]

    async def scenario() -> tuple[int, int, int]:
        leases = [await limiter.acquire_slot("inflight:anonymous", 4, ttl=30) for _ in range(4)]
        refused = (await _asgi_get(app, "/export/orders")).status_code
        for lease in leases:
            await limiter.release_slot(lease)
        served = await _asgi_get(app, "/export/orders")
        return refused, served.status_code, len(served.text.splitlines())

    assert asyncio.run(scenario()) == (429, 200, 1000)


def test_shedding_example_sheds_by_its_table_and_never_sheds_health() -> None:
    """The load shedding example, with 0 to 10 of its 10 slots held: each class runs or gets a
    503 as the page's table says, and /health always answers."""
    (block,) = [b for b in BLOCKS if "SheddingMiddleware," in b]
    namespace = _run(block)
    app, shedder = namespace["app"], namespace["shedder"]
    # in flight -> the statuses of critical, normal, batch, test
    table = {n: [200, 200, 200, 200] for n in range(4)}
    table.update({n: [200, 200, 200, 503] for n in (4, 5)})
    table.update({n: [200, 200, 503, 503] for n in (6, 7)})
    table.update({n: [200, 503, 503, 503] for n in (8, 9)})
    table[10] = [503, 503, 503, 503]

    async def scenario() -> tuple[dict[int, list[int]], int]:
        seen = {}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://testserver"
        ) as client:
            for in_flight in range(11):
                leases = [(await shedder.acquire("critical"))[1] for _ in range(in_flight)]
                seen[in_flight] = [
                    (await client.get("/v1/report", headers={"x-priority": c})).status_code
                    for c in ("critical", "normal", "batch", "test")
                ]
                if in_flight == 10:
                    health = (await client.get("/health")).status_code
                for lease in leases:
                    await shedder.release(lease)
        return seen, health

    assert asyncio.run(scenario()) == (table, 200)


def test_wsgi_shedding_example_classes_by_path_and_user_agent() -> None:
    """The Flask example's classify: with 24 of 40 slots held a nightly export (batch) is shed,
    a plain request (normal) runs; with 32, an /admin/ request (critical) is still let in."""
    (block,) = [b for b in BLOCKS if "WSGISheddingMiddleware(" in b]
    namespace = _run(block)
    client, shedder = namespace["app"].test_client(), namespace["shedder"]
    leases = [shedder.acquire("critical")[1] for _ in range(24)]
    export = {"User-Agent": "nightly-export/2.1"}
    at_24 = [client.get("/export", headers=export).status_code, client.get("/export").status_code]
    leases += [shedder.acquire("critical")[1] for _ in range(8)]
    at_32 = [client.get("/export").status_code, client.get("/admin/stats").status_code]
    for lease in leases:
        shedder.release(lease)
    assert at_24 == [503, 200]
    assert at_32 == [503, 404]  # admitted as critical; the example has no such route


def test_budget_example_settles_what_the_endpoint_reports() -> None:
    """The token budget example refunds down to the reported use on the response itself."""
    (block,) = [b for b in BLOCKS if "AsyncTokenBudget(" in b]
    app = _run(block)["app"]

    async def chat() -> httpx.Response:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://testserver"
        ) as client:
            return await client.post("/v1/chat", json={"prompt": "x" * 400, "max_tokens": 500})

    response = asyncio.run(chat())
    assert response.status_code == 200
    # 112 used of 600 reserved; the real clock refills 1,667 tokens a second meanwhile.
    assert (
        100_000 - 112
        <= int(response.headers["x-ratelimit-remaining-tokens"])
        < 100_000 - 112 + 1_667
    )


def test_wsgi_budget_example_settles_a_stream_with_actual() -> None:
    """The WSGI token budget example on Flask: the chat streams, and ``actual`` (what the
    stream left in the environ) settles it once it is sent: 104 tokens used of 4,196."""
    (block,) = [b for b in BLOCKS if "WSGITokenBudgetMiddleware(" in b]
    namespace = _run(block)
    client = namespace["app"].test_client()
    response = client.post("/v1/chat", json={"prompt": "x" * 400, "max_tokens": 100})
    assert response.get_data() == b"Hello from the model "
    # The headers left with the stream's start: the reservation's view (100 in, 100 out).
    assert response.headers["x-ratelimit-remaining-tokens"] == "99800"
    left = namespace["budget"].peek("budget:anonymous").axis("tokens").remaining
    # 104 used; the real clock refills 1,667 tokens a second meanwhile.
    assert 100_000 - 104 <= left < 100_000 - 104 + 1_667


async def test_django_asgi_example_limits_under_django_s_asgi_handler() -> None:
    """The Django-under-ASGI example's limiter and rules, as the setting, are taken in async
    mode by Django's own ASGI handler, and its answers carry the per-user policy."""
    from django.core.handlers.asgi import ASGIHandler
    from django.test.utils import override_settings

    (block,) = [b for b in BLOCKS if "limiter = AsyncLimiter(" in b and "django_user" in b]
    namespace = _run(block)
    with override_settings(
        ROOT_URLCONF="tests.middleware.test_django_async",
        MIDDLEWARE=["ratewarden.middleware.django.DjangoRateLimitMiddleware"],
        RATEWARDEN_MIDDLEWARE={"limiter": namespace["limiter"], "rules": namespace["rules"]},
    ):
        response = await _asgi_get(ASGIHandler(), "/notes")
    assert response.status_code == 200 and response.json() == {"user": None}
    assert response.headers["RateLimit-Policy"] == '"per-user";q=600;w=3600'


def test_the_denied_headers_example_imports_its_names_and_prints_the_page_s_answer() -> None:
    """The denied run under "Response headers" imports HeaderOptions and ManualClock itself
    and prints exactly what the page shows after it: the status, every header as httpx gives
    it (content-length too), and the body."""
    page = PAGE.read_text(encoding="utf-8")
    (block,) = [b for b in BLOCKS if "HeaderOptions(legacy=True" in b]
    shown = page.split(block + "```\n\n```\n", 1)[1].split("```", 1)[0]
    assert "from ratewarden.headers import HeaderOptions" in block
    assert "from ratewarden.testing import ManualClock" in block
    printed: list[str] = []
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    namespace["print"] = lambda *args, **kwargs: printed.append(" ".join(map(str, args)))
    exec(compile(block, str(PAGE), "exec"), namespace)
    assert "".join(line + "\n" for line in printed) == shown


def test_each_django_example_is_one_block_per_file() -> None:
    """Each Django example pastes as is: settings.py in a block of its own, headed by its name,
    and the module its dotted paths name in the next block, headed by that module's file."""
    blocks = _BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    headings = [re.findall(r"^# (settings\.py|myproject/\w+\.py)", b, re.M) for b in blocks]
    assert all(len(found) <= 1 for found in headings)
    settings = [i for i, found in enumerate(headings) if found == ["settings.py"]]
    assert len(settings) == 4
    for at in settings:
        (module,) = re.findall(r'"myproject\.(\w+)\.', blocks[at])[:1]
        assert blocks[at + 1].startswith(f"# myproject/{module}.py")

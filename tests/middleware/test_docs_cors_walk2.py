"""middleware.md's "With CORS" example, run as written: CORS outside the rate limit answers the
preflight without spending, and exposes the RateLimit headers."""

from __future__ import annotations

import httpx

from tests.middleware.test_docs_examples import BLOCKS, _run

ORIGIN = {"origin": "https://app.example"}
PREFLIGHT = {**ORIGIN, "access-control-request-method": "POST"}


async def test_the_cors_example_spends_nothing_on_preflights_and_exposes_the_headers() -> None:
    """A preflight has no RateLimit header and spends nothing (the POST after it has 599 of 600
    left); the POST has the origin and exposes the headers."""
    (block,) = [b for b in BLOCKS if "CORSMiddleware" in b]
    app = _run(block)["app"]
    transport = httpx.ASGITransport(app=app, client=("198.51.100.4", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        preflight = await client.options("/orders", headers=PREFLIGHT)
        posted = await client.post("/orders", headers=ORIGIN)
    assert preflight.status_code == 200 and "ratelimit" not in preflight.headers
    assert '"per-ip";r=599;' in posted.headers["ratelimit"]
    assert posted.headers["access-control-allow-origin"] == "https://app.example"
    exposed = posted.headers["access-control-expose-headers"].lower().replace(" ", "")
    assert {"ratelimit", "ratelimit-policy", "retry-after"} <= set(exposed.split(","))

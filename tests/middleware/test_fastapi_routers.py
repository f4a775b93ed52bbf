"""The route decorators on routes of FastAPI ``APIRouter``s brought in with ``include_router``.

FastAPI 0.165 stopped copying an included router's routes into ``app.routes``: it holds one
node per inclusion, and the routes, with the inclusion's prefix, sit behind it. The decorators
must be found there as on a route of the app itself."""

from __future__ import annotations

import fastapi.routing
import pytest
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ratewarden import AsyncLimiter, AsyncMemoryStore
from ratewarden.middleware import RateLimitMiddleware, Rule, RuleSet, exempt, limit, override
from ratewarden.testing import ManualClock
from tests.middleware._helpers import peer_client
from tests.middleware._sfv import parse_list

# Before 0.165 FastAPI copied an included router's API and plain routes into the app at
# include time: a mount inside one, or a route added later, was not served at all.
by_reference = pytest.mark.skipif(
    not hasattr(fastapi.routing, "_IncludedRouter"),
    reason="this FastAPI copies an included router's routes into the app",
)


def _limited(app: FastAPI, per_ip: str = "3/minute") -> FastAPI:
    clock = ManualClock()
    app.add_middleware(
        RateLimitMiddleware,
        limiter=AsyncLimiter(AsyncMemoryStore(clock=clock)),
        rules=RuleSet([Rule("per-ip", per_ip)], clock=clock),
    )
    return app


def _policies(response: Response) -> list[str]:
    return [str(item.value) for item in parse_list(response.headers.get("ratelimit", ""))]


async def test_limit_and_exempt_on_an_included_router_apply() -> None:
    """@limit on a router's login route denies the third try; @exempt keeps its health check
    free of every rule (the walk's repro: both were ignored)."""
    router = APIRouter()

    @router.post("/login")
    @limit("2/minute", name="login")
    async def login() -> dict[str, bool]:
        return {"ok": True}

    @exempt()
    @router.get("/health")
    async def health() -> str:
        return "ok"

    app = FastAPI()
    app.include_router(router)
    async with peer_client(_limited(app)) as client:
        answers = [await client.post("/login") for _ in range(3)]
        assert [r.status_code for r in answers] == [200, 200, 429]
        assert _policies(answers[2])[0] == "login"
        for _ in range(5):
            free = await client.get("/health")
            assert free.status_code == 200
            assert "ratelimit" not in free.headers


async def test_prefixed_router_with_path_parameters_and_override() -> None:
    """Under prefix="/v1", a route with a path parameter gets its @limit, and @override's cost
    is charged to the global rule; the same path without the prefix is not the route."""
    router = APIRouter(prefix="/v1")

    @router.get("/search/{term}")
    @limit("3/minute", name="search")
    async def search(term: str) -> dict[str, str]:
        return {"term": term}

    @router.post("/report")
    @override("per-ip", cost=4)
    async def report() -> dict[str, bool]:
        return {"ok": True}

    app = FastAPI()
    app.include_router(router)
    async with peer_client(_limited(app, "10/minute")) as client:
        statuses = [(await client.get(f"/v1/search/t{i}")).status_code for i in range(4)]
        assert statuses == [200, 200, 200, 429]
        reported = await client.post("/v1/report")
        assert reported.status_code == 200
        # 4 searches (one denied by "search", still counted by per-ip first) and one report of 4.
        assert parse_list(reported.headers["ratelimit"])[0].params["r"] == 10 - 4 - 4
        assert (await client.get("/search/x")).status_code == 404


async def test_nested_routers_with_dependencies_keep_their_decorators() -> None:
    """A router included in a router included in the app, each with a prefix and with
    dependencies at both levels: the innermost route's @limit applies and the dependencies
    still run."""
    seen: list[str] = []

    async def audit(request: Request) -> None:
        seen.append(request.url.path)

    async def needs_key(x_key: str = Header("")) -> None:
        if x_key != "k":
            raise HTTPException(status_code=403)

    users = APIRouter(prefix="/users", dependencies=[Depends(audit)])

    @users.get("/{user_id}")
    @limit("1/minute", name="profile")
    async def profile(user_id: int) -> dict[str, int]:
        return {"id": user_id}

    api = APIRouter(prefix="/api")
    api.include_router(users, dependencies=[Depends(needs_key)])
    app = FastAPI()
    app.include_router(api, prefix="/v2")
    async with peer_client(_limited(app, "100/minute")) as client:
        key = {"x-key": "k"}
        first = await client.get("/v2/api/users/7", headers=key)
        assert first.json() == {"id": 7}
        assert "profile" in _policies(first)
        assert (await client.get("/v2/api/users/7", headers=key)).status_code == 429
        assert (await client.get("/v2/api/users/8")).status_code == 429  # same budget: per IP
    assert seen == ["/v2/api/users/7"]


@by_reference
async def test_starlette_routes_and_mounts_inside_an_included_router() -> None:
    """A plain Starlette route and a mounted app's route, both inside an included router, are
    found under the inclusion's prefix."""

    @exempt()
    async def ping(request: Request) -> Response:
        return PlainTextResponse("pong")

    @limit("1/minute", name="inner")
    async def inner(request: Request) -> Response:
        return PlainTextResponse("inner")

    sub = FastAPI()
    sub.router.routes.append(Route("/inner", inner))
    router = APIRouter()
    router.add_route("/ping", ping)
    router.mount("/sub", sub)
    app = FastAPI()
    app.include_router(router, prefix="/p")
    async with peer_client(_limited(app, "2/minute")) as client:
        for _ in range(4):
            assert (await client.get("/p/ping")).status_code == 200
        assert (await client.get("/p/sub/inner")).status_code == 200
        denied = await client.get("/p/sub/inner")
        assert denied.status_code == 429
        assert _policies(denied)[-1] == "inner"


async def test_one_router_included_twice_is_limited_under_both_prefixes() -> None:
    """Included at /a and /b, the decorated route is found under each prefix; the two share
    the rule's budget (one name, one budget)."""
    router = APIRouter()

    @router.get("/x")
    @limit("2/minute", name="x")
    async def x() -> str:
        return "x"

    app = FastAPI()
    app.include_router(router, prefix="/a")
    app.include_router(router, prefix="/b")
    async with peer_client(_limited(app, "100/minute")) as client:
        assert (await client.get("/a/x")).status_code == 200
        assert (await client.get("/b/x")).status_code == 200
        assert (await client.get("/a/x")).status_code == 429


@by_reference
async def test_routes_added_to_an_included_router_after_the_first_request() -> None:
    """The 'no decorated route' shortcut is walked again when an included router (not the
    app's own table) grows, as FastAPI now serves routes added after include_router."""
    router = APIRouter()

    @router.get("/")
    async def home() -> str:
        return "home"

    app = FastAPI()
    app.include_router(router)
    async with peer_client(_limited(app, "1/hour")) as client:
        assert (await client.get("/")).status_code == 200

        @router.get("/health")
        @exempt()
        async def health() -> str:
            return "ok"

        for _ in range(3):
            assert (await client.get("/health")).status_code == 200
        assert (await client.get("/")).status_code == 429

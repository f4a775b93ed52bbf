"""The ``/`` index lists ``/rlqs.json`` only while RLQS is on (``--rlqs``); off, the route
still answers its 404 with the way to turn it on, but the index no longer offers it."""

from __future__ import annotations

from typing import Any

import httpx

from ratewarden.server.http_app import HttpApp
from tests.server_transport.test_http_app import Backend


class RlqsBackend(Backend):
    """A backend whose quota service is on (one open stream) or off."""

    def __init__(self, *, rlqs: bool) -> None:
        super().__init__()
        self.rlqs_on = rlqs

    def rlqs_streams(self) -> int | None:
        return 1 if self.rlqs_on else None

    def rlqs(self) -> dict[str, Any] | None:
        return {"streams": 1} if self.rlqs_on else None


async def get(backend: Backend, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=HttpApp(backend))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        return await http.get(path)


def listed(reply: httpx.Response) -> list[str]:
    return [line.split(": ", 1)[0] for line in reply.text.splitlines()]


async def test_with_rlqs_off_the_index_leaves_rlqs_json_out() -> None:
    """It listed /rlqs.json, which answered 404 "RLQS is off"; the 404 stays."""
    backend = RlqsBackend(rlqs=False)
    assert "/rlqs.json" not in listed(await get(backend, "/"))
    refused = await get(backend, "/rlqs.json")
    assert (refused.status_code, refused.text) == (
        404,
        "RLQS is off; start the server with --rlqs\n",
    )


async def test_with_rlqs_on_the_index_lists_rlqs_json() -> None:
    """With --rlqs the index offers it, and it answers."""
    backend = RlqsBackend(rlqs=True)
    assert "/rlqs.json" in listed(await get(backend, "/"))
    assert (await get(backend, "/rlqs.json")).json() == {"streams": 1}

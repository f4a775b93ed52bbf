"""A WSGI app that writes with PEP 3333's ``write()`` callable is replayed whole: what it
wrote, then what it returned. Under werkzeug's threaded server on loopback."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
import requests

from ratewarden.middleware._types import StartResponse
from ratewarden.middleware.idempotency import WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import MemoryIdempotencyStore, RedisIdempotencyStore
from tests._servers import RedisServer
from tests.client._live import LiveWSGI
from tests.idempotency.conftest import unique_prefix


class Legacy:
    """A PEP 3333 app of the old school: it writes its first line with ``write()`` and
    returns the rest; it counts its runs."""

    def __init__(self) -> None:
        self.runs = itertools.count(1)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        write = start_response("201 Created", [("Content-Type", "text/plain")])
        write(f"written run {next(self.runs)}\n".encode())
        return [b"tail\n"]


@pytest.fixture(params=["memory", "redis"])
def server(request: pytest.FixtureRequest) -> Iterator[LiveWSGI]:
    """The legacy app behind the middleware, on each store."""
    store: Any = MemoryIdempotencyStore()
    if request.param == "redis":
        redis_server: RedisServer = request.getfixturevalue("redis_server")
        store = RedisIdempotencyStore(redis_server.client(), prefix=unique_prefix())
    live = LiveWSGI(WSGIIdempotencyMiddleware(Legacy(), store))
    yield live
    live.stop()


def test_written_output_is_stored_and_replayed(server: LiveWSGI) -> None:
    """The retry gets the first run's whole body, written part included, and nothing runs
    again."""
    headers = {"Idempotency-Key": "legacy-1"}
    first = requests.post(f"{server.url}/legacy", headers=headers, timeout=5)
    replay = requests.post(f"{server.url}/legacy", headers=headers, timeout=5)
    assert (first.status_code, first.content) == (201, b"written run 1\ntail\n")
    assert (replay.status_code, replay.content) == (201, b"written run 1\ntail\n")
    assert replay.headers["idempotent-replayed"] == "true"

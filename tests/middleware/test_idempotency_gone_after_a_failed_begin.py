"""After a failed ``begin`` whose SET may still land, the WSGI Idempotency-Key middleware gives
the lock back once the server has taken the answer's last chunk, not only on ``close()``.

werkzeug's server skips the response's ``close()`` when the client resets the connection right
after the response. The lock that landed (the 503's, or ``fail_open``'s unguarded run) then held
the key for ``lock_ttl``: the client's retry was told 409 by a request that was over. On a real
redis-server whose first SET lands and whose reply is lost (``BlockingSentTwice``).
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from ratewarden.middleware.idempotency import WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import RedisIdempotencyStore
from tests._servers import HOST, RedisServer
from tests.idempotency.conftest import unique_prefix
from tests.idempotency.test_sent_again import BlockingSentTwice

pytestmark = pytest.mark.timeout(60)


def _app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("201 Created", [("Content-Type", "text/plain")])
    return [b"paid"]


def _post(app: WSGIIdempotencyMiddleware) -> tuple[str, bytes]:
    """POST with key ``k``, the response iterated to its end and never closed."""
    started: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc: Any = None) -> Any:
        started.append(status)
        return lambda data: None

    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/orders",
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "CONTENT_LENGTH": "1",
        "HTTP_IDEMPOTENCY_KEY": "k",
        "wsgi.input": io.BytesIO(b"1"),
    }
    body = b"".join(list(app(environ, start_response)))
    return started[0], body


@pytest.mark.parametrize("fail_open", [False, True])
def test_a_lock_that_landed_is_given_back_at_the_end_without_close(
    redis_server: RedisServer, fail_open: bool
) -> None:
    """The first SET lands and its reply is lost: 503 (or the unguarded run); the answer is
    iterated to its end and never closed, and still no key is left, so the retry runs."""
    client = BlockingSentTwice(host=HOST, port=redis_server.port)
    client.lose_first_set = True
    prefix = unique_prefix()
    app = WSGIIdempotencyMiddleware(
        _app, RedisIdempotencyStore(client, prefix=prefix), fail_open=fail_open
    )
    try:
        first = _post(app)
        left = client.keys(prefix + "*")
        retry = _post(app)
    finally:
        client.close()
    assert first[0] == ("201 Created" if fail_open else "503 Service Unavailable")
    assert left == []
    assert retry == ("201 Created", b"paid")

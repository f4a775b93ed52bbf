"""The HTTP port's ASGI app called directly, without a server: routing, bad input, body limits.

httpx's ASGITransport plays the server for whole requests; the body-limit tests
drive ``receive`` by hand to see how much of a body the app reads.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.errors import ConfigurationError
from ratewarden.server.http_app import MAX_BODY_BYTES, HttpApp

ONE_KEY = json.dumps({"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]})


class Backend:
    """An HttpBackend whose service answers OK, or refuses an empty domain as the real one does."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.fail_rules = False

    def serving(self) -> bool:
        return True

    def rules_text(self) -> str:
        if self.fail_rules:
            raise RuntimeError("a bug with a secret in it")
        return "d.k: 3/minute\n"

    def rules_dict(self) -> dict[str, Any]:
        return {"domains": []}

    async def should_rate_limit(self, request: Any) -> Any:
        if not request.domain:
            raise ConfigurationError("domain is empty")
        self.calls.append(request)
        return rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)

    def metrics(self, accept: str) -> tuple[bytes, str]:
        return f"# accept={accept}\n".encode(), "text/plain; version=0.0.4"

    def dashboard(self) -> dict[str, Any]:
        return {"rules": []}

    def rlqs_streams(self) -> int | None:
        return None  # RLQS off: /healthcheck says OK alone


@pytest.fixture
def backend() -> Backend:
    return Backend()


@pytest.fixture
async def client(backend: Backend) -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``HttpApp(backend)``, called in process as a loopback peer."""
    transport = httpx.ASGITransport(app=HttpApp(backend))
    async with httpx.AsyncClient(transport=transport, base_url="http://ratewarden") as client:
        yield client


async def test_json_answers_with_the_service_response(
    client: httpx.AsyncClient, backend: Backend
) -> None:
    """A valid RateLimitRequest reaches the service once and its answer comes back as JSON."""
    reply = await client.post("/json", content=ONE_KEY)
    assert (reply.status_code, reply.headers["content-type"]) == (200, "application/json")
    assert reply.json() == {"overallCode": "OK"}
    assert [request.domain for request in backend.calls] == ["d"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", b"not a RateLimitRequest"),
        (b'{"domian": "x"}', b"domian"),
        (b"\xff\xfe", b"not a RateLimitRequest"),
        (b'{"domain": ""}', b"domain is empty"),
        (b"", b"the body is empty"),
    ],
    ids=["broken-json", "unknown-field", "not-utf8", "empty-domain", "no-body"],
)
async def test_json_refuses_a_body_that_is_not_a_valid_request_with_400(
    client: httpx.AsyncClient, body: bytes, reason: bytes
) -> None:
    """Each kind of bad body is a 400 whose text says what was wrong, never a 5xx."""
    reply = await client.post("/json", content=body)
    assert reply.status_code == 400
    assert reason in reply.content


async def test_unknown_paths_are_404_and_wrong_methods_405_with_allow(
    client: httpx.AsyncClient,
) -> None:
    """The routes are exact paths; a known path with another method says which are allowed."""
    assert (await client.get("/stats")).status_code == 404
    assert (await client.get("/json/")).status_code == 404
    wrong = await client.put("/healthcheck")
    assert (wrong.status_code, wrong.headers["allow"]) == (405, "GET, HEAD")
    assert (await client.get("/json")).headers["allow"] == "POST"


async def test_head_answers_the_get_headers_without_a_body(client: httpx.AsyncClient) -> None:
    """HEAD on a GET route: same status and Content-Length as the GET, no body."""
    get = await client.get("/healthcheck")
    head = await client.head("/healthcheck")
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-length"] == get.headers["content-length"] == "3"


async def test_rlconfig_and_metrics_read_the_query_and_the_accept_header(
    client: httpx.AsyncClient,
) -> None:
    """?format=json picks the JSON view; /metrics passes Accept to the backend."""
    assert (await client.get("/rlconfig")).text == "d.k: 3/minute\n"
    assert (await client.get("/rlconfig?format=json")).json() == {"domains": []}
    metrics = await client.get("/metrics", headers={"Accept": "application/openmetrics-text"})
    assert metrics.text == "# accept=application/openmetrics-text\n"


async def test_a_failing_endpoint_is_a_plain_500_and_a_log_line(
    client: httpx.AsyncClient, backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception in an endpoint is logged with its traceback; the client sees no detail."""
    backend.fail_rules = True
    with caplog.at_level(logging.ERROR, logger="ratewarden.server.http"):
        reply = await client.get("/rlconfig")
    assert (reply.status_code, reply.text) == (500, "Internal Server Error\n")
    [record] = caplog.records
    assert record.event == "http_error"  # type: ignore[attr-defined]
    assert "secret" in caplog.text


class Body:
    """``receive`` for a POST /json whose body comes in ``chunk``-byte pieces, ``total`` in all
    (endless when None); counts the bytes the app took."""

    def __init__(self, chunk: int, total: int | None, content_length: int | None = None) -> None:
        self.chunk = chunk
        self.total = total
        self.taken = 0
        self.sent: list[dict[str, Any]] = []
        headers = [] if content_length is None else [(b"content-length", b"%d" % content_length)]
        self.scope = {
            "type": "http",
            "method": "POST",
            "path": "/json",
            "query_string": b"",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
        }

    async def receive(self) -> dict[str, Any]:
        left = self.chunk if self.total is None else min(self.chunk, self.total - self.taken)
        self.taken += left
        more = self.total is None or self.taken < self.total
        return {"type": "http.request", "body": b" " * left, "more_body": more}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def reply(self) -> tuple[int, dict[bytes, bytes], bytes]:
        start, body = self.sent
        return start["status"], dict(start["headers"]), body["body"]


async def test_an_endless_body_is_413_as_soon_as_it_passes_1_mib(backend: Backend) -> None:
    """A streamed (chunked) body with no end: the app stops reading at the limit, holding no
    more than the limit, answers 413 and asks for the connection to be closed."""
    body = Body(chunk=64 * 1024, total=None)
    await HttpApp(backend)(body.scope, body.receive, body.send)
    status, headers, text = body.reply()
    assert (status, headers[b"connection"], text) == (413, b"close", b"request body over 1 MiB\n")
    assert body.taken == MAX_BODY_BYTES + 64 * 1024  # the one chunk that passed the limit
    assert backend.calls == []


async def test_a_body_of_exactly_1_mib_is_read_and_one_byte_more_is_413(backend: Backend) -> None:
    """The limit is inclusive: 1 MiB reaches the JSON parser (400: spaces are no request)."""
    at_limit = Body(chunk=100_000, total=MAX_BODY_BYTES)
    over = Body(chunk=100_000, total=MAX_BODY_BYTES + 1)
    for body in (at_limit, over):
        await HttpApp(backend)(body.scope, body.receive, body.send)
    assert (at_limit.reply()[0], over.reply()[0]) == (400, 413)


async def test_a_declared_length_over_1_mib_is_413_before_any_of_the_body_is_read(
    backend: Backend,
) -> None:
    """Content-Length over the limit is refused from the head: not one body byte is read."""
    body = Body(chunk=64 * 1024, total=2 * MAX_BODY_BYTES, content_length=2 * MAX_BODY_BYTES)
    await HttpApp(backend)(body.scope, body.receive, body.send)
    assert (body.reply()[0], body.taken) == (413, 0)


async def test_a_client_gone_before_its_body_ends_gets_no_answer(backend: Backend) -> None:
    """http.disconnect while the body is read: nothing is sent and the service is not called."""
    sent: list[Any] = []
    messages = iter(
        [{"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}]
    )

    async def receive() -> Any:
        return next(messages)

    async def send(message: Any) -> None:
        sent.append(message)

    await HttpApp(backend)(Body(1, 1).scope, receive, send)
    assert (sent, backend.calls) == ([], [])


async def test_only_http_scopes_are_served(backend: Backend) -> None:
    """A lifespan or websocket scope is refused, as ASGI asks of an app that does not speak it."""

    async def never() -> Any:
        raise AssertionError("not called")

    with pytest.raises(ValueError, match="'lifespan'"):
        await HttpApp(backend)({"type": "lifespan"}, never, never)

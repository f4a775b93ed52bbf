"""``POST /json`` bodies the HTTP port refuses, each with a 4xx that says what is wrong.

A top-level array nested about 1000 deep escaped the parser as a ``RecursionError``: a 500 and a
traceback logged per request. An empty body was read as ``{}`` and told to fix Envoy's domain. A
gzip body was decoded as UTF-8. httpx's ASGITransport plays the server.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import AsyncIterator

import httpx
import pytest

from ratewarden.server.http_app import HttpApp
from tests.server_transport.test_http_app import ONE_KEY, Backend

TOO_DEEP = (
    "not a RateLimitRequest: the JSON is nested too deeply (a RateLimitRequest nests 5 levels)\n"
)
DEPTH = 100_000  # past any recursion limit Python's parser runs under (200 KB, under 1 MiB)


@pytest.fixture
def backend() -> Backend:
    return Backend()


@pytest.fixture
async def client(backend: Backend) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=HttpApp(backend))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        yield http


@pytest.mark.parametrize(
    "body",
    [
        "[" * DEPTH + "]" * DEPTH,
        " " + "[" * DEPTH + "]" * DEPTH,
        '{"domain": "d", "descriptors": ' + "[" * DEPTH + "]" * DEPTH + "}",
        '{"domain": "d", "x": ' + '{"a": ' * DEPTH + "1" + "}" * DEPTH + "}",
    ],
    ids=["top-level-array", "after-a-space", "inside-a-field", "objects-in-an-object"],
)
async def test_json_nested_too_deeply_is_400_and_logs_nothing(
    client: httpx.AsyncClient, body: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Deep nesting at the top or inside the object: 400 saying so (the top-level array was a
    500 with a traceback logged; inside an object the 400 gave Python's recursion message)."""
    with caplog.at_level(logging.DEBUG, logger="ratewarden"):
        reply = await client.post("/json", content=body.encode())
    assert (reply.status_code, reply.text) == (400, TOO_DEEP)
    assert [record.getMessage() for record in caplog.records] == []


@pytest.mark.parametrize("depth", [900, 1000, 5000])
async def test_an_array_near_the_parsers_limit_is_400_either_way(
    client: httpx.AsyncClient, depth: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Around the depth where the parser gives up (the report's 1000), the answer is a 400 that
    names the array or the depth, never a 500, and no line is logged."""
    with caplog.at_level(logging.DEBUG, logger="ratewarden"):
        reply = await client.post("/json", content=b"[" * depth + b"]" * depth)
    assert reply.status_code == 400
    assert reply.text == TOO_DEEP or reply.text.endswith("not an array\n")
    assert caplog.records == []


async def test_an_empty_body_says_it_is_empty_and_what_to_send(
    client: httpx.AsyncClient, backend: Backend
) -> None:
    """No body (or one sent without Content-Length, read as none) said "domain is empty", a hint
    at Envoy's filter; it now says the body is empty and what to POST."""
    reply = await client.post("/json", content=b"")
    assert reply.status_code == 400
    assert reply.text == (
        "not a RateLimitRequest: the body is empty; POST one as a JSON object "
        '({"domain": ..., "descriptors": [...]}), with Content-Length or chunked\n'
    )
    assert backend.calls == []


@pytest.mark.parametrize("encoding", ["gzip", "br", "identity, gzip", "GZIP"])
async def test_a_compressed_body_is_415_naming_the_encoding(
    client: httpx.AsyncClient, backend: Backend, encoding: str
) -> None:
    """A gzip body was 400 with a UTF-8 codec error; any coding but identity is now 415 naming
    it, with Accept-Encoding: identity (RFC 9110 15.5.16)."""
    named = encoding.rsplit(", ", maxsplit=1)[-1]
    body = gzip.compress(ONE_KEY.encode())
    reply = await client.post("/json", content=body, headers={"Content-Encoding": encoding})
    assert reply.status_code == 415
    assert reply.text == (
        f"Content-Encoding {named} is not supported; send the body uncompressed "
        "(no Content-Encoding, or identity)\n"
    )
    assert reply.headers["accept-encoding"] == "identity"
    assert backend.calls == []


async def test_a_repeated_content_encoding_field_is_read_whole(client: httpx.AsyncClient) -> None:
    """Two Content-Encoding lines are one list: gzip after identity is still refused."""
    headers = [("Content-Encoding", "identity"), ("Content-Encoding", "gzip")]
    reply = await client.post("/json", content=gzip.compress(ONE_KEY.encode()), headers=headers)
    assert reply.status_code == 415


@pytest.mark.parametrize("encoding", ["identity", " Identity "])
async def test_identity_is_the_body_as_sent(
    client: httpx.AsyncClient, backend: Backend, encoding: str
) -> None:
    """identity is no coding at all: the request is answered as without the field."""
    reply = await client.post("/json", content=ONE_KEY, headers={"Content-Encoding": encoding})
    assert (reply.status_code, reply.json()) == (200, {"overallCode": "OK"})
    assert len(backend.calls) == 1

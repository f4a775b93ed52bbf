"""Answers of the HTTP port the audit of ``ratewarden serve`` found unclear, read in-process.

``POST /json`` with valid JSON that is no object says the body must be a RateLimitRequest,
a JSON object, not Python's words; ``/rlconfig?format=`` takes ``text`` or ``json`` in any
case and answers another value with 400. httpx's ASGITransport plays the server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from ratewarden.server.http_app import HttpApp
from tests.server_transport.test_http_app import Backend


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    backend = Backend()
    transport = httpx.ASGITransport(app=HttpApp(backend))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        yield http


@pytest.mark.parametrize(
    ("body", "kind"),
    [(b"null", "null"), (b"42", "a number"), (b" []", "an array"), (b'"d"', "a string")],
)
async def test_a_json_body_that_is_no_object_is_400_naming_what_it_is(
    client: httpx.AsyncClient, body: bytes, kind: str
) -> None:
    """null and 42 said "TypeError: 'NoneType' object is not iterable"; [] said "domain is
    empty". Each now says the body must be a JSON object (a RateLimitRequest)."""
    reply = await client.post("/json", content=body)
    assert reply.status_code == 400
    assert reply.text == (
        "not a RateLimitRequest: the body must be a JSON object "
        f'({{"domain": ..., "descriptors": [...]}}), not {kind}\n'
    )


async def test_a_body_that_is_no_json_keeps_the_parsers_reason(client: httpx.AsyncClient) -> None:
    """Text that is not JSON at all still gets the parser's own account of it."""
    reply = await client.post("/json", content=b"nope")
    assert reply.status_code == 400
    assert reply.text.startswith("not a RateLimitRequest: Failed to load JSON: Expecting value")


@pytest.mark.parametrize("query", ["format=JSON", "format=Json", "format=json"])
async def test_rlconfig_format_is_matched_in_any_case(
    client: httpx.AsyncClient, query: str
) -> None:
    """?format=JSON answered the text form; any case of json is the JSON form."""
    reply = await client.get(f"/rlconfig?{query}")
    assert (reply.status_code, reply.json()) == (200, {"domains": []})


@pytest.mark.parametrize("query", ["", "format=text", "format=TEXT"])
async def test_rlconfig_text_is_the_default_and_can_be_named(
    client: httpx.AsyncClient, query: str
) -> None:
    reply = await client.get(f"/rlconfig?{query}")
    assert (reply.status_code, reply.text) == (200, "d.k: 3/minute\n")


@pytest.mark.parametrize(
    ("query", "given"),
    [("format=xml", "'xml'"), ("format=", "''"), ("format=json&format=text", "'json', 'text'")],
)
async def test_rlconfig_refuses_another_format_naming_the_accepted_ones(
    client: httpx.AsyncClient, query: str, given: str
) -> None:
    """An unknown or repeated format was answered with the text form, silently."""
    reply = await client.get(f"/rlconfig?{query}")
    assert reply.status_code == 400
    assert reply.text == (f"format must be one of text, json (any case), given once; got {given}\n")

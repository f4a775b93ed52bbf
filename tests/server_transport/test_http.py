"""The HTTP transport over loopback: /json, /healthcheck, /rlconfig, and HTTP/1.1 framing."""

from __future__ import annotations

import asyncio
import json

from envoy.service.ratelimit.v3 import rls_pb2_grpc

from tests.server_transport.conftest import (
    HOST,
    OVER_LIMIT,
    PingStore,
    StartServer,
    channel,
    http,
    parse_reply,
    request,
)

ONE_KEY = json.dumps(
    {"domain": "transport", "descriptors": [{"entries": [{"key": "api_key", "value": "a"}]}]}
).encode()


async def test_json_answers_200_until_the_limit_then_429(start_server: StartServer) -> None:
    """POST /json speaks the envoyproxy/ratelimit JSON shape; over the limit is HTTP 429."""
    server = await start_server()
    replies = [await http(server.http_port, "POST", "/json", ONE_KEY) for _ in range(4)]
    assert [r.status for r in replies] == [200, 200, 200, 429]
    assert replies[0].headers["content-type"] == "application/json"
    first = replies[0].json()
    assert first["overallCode"] == "OK"
    assert first["statuses"][0]["currentLimit"] == {"requestsPerUnit": 3, "unit": "HOUR"}
    assert first["statuses"][0]["limitRemaining"] == 2
    assert replies[3].json()["overallCode"] == "OVER_LIMIT"


async def test_json_shares_counters_with_grpc(start_server: StartServer) -> None:
    """/json goes through the same service and store as gRPC: both count the same key."""
    server = await start_server()
    for _ in range(3):
        assert (await http(server.http_port, "POST", "/json", ONE_KEY)).status == 200
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        reply = await stub.ShouldRateLimit(request("transport", {"api_key": "a"}))
    assert reply.overall_code == OVER_LIMIT


async def test_json_refuses_what_is_not_a_rate_limit_request(start_server: StartServer) -> None:
    """Invalid JSON, unknown fields and an empty domain are 400 with the reason."""
    server = await start_server()
    broken = await http(server.http_port, "POST", "/json", b"{not json")
    unknown = await http(server.http_port, "POST", "/json", b'{"domian": "x"}')
    empty = await http(server.http_port, "POST", "/json", b'{"domain": ""}')
    assert [broken.status, unknown.status, empty.status] == [400, 400, 400]
    assert b"not a RateLimitRequest" in broken.body
    assert b"domian" in unknown.body
    assert b"domain is empty" in empty.body


async def test_healthcheck_follows_the_store(start_server: StartServer) -> None:
    """/healthcheck is 500 while the store does not answer and 200 OK once it does."""
    store = PingStore()
    server = await start_server(store=store)
    down = await http(server.http_port, "GET", "/healthcheck")
    store.alive = True
    await server.refresh_health()
    up = await http(server.http_port, "GET", "/healthcheck")
    assert (down.status, up.status, up.body) == (500, 200, b"OK\n")


async def test_rlconfig_shows_the_loaded_rules_as_text_or_json(start_server: StartServer) -> None:
    """/rlconfig lists one line per rule; ?format=json gives the normalised config."""
    server = await start_server()
    text = await http(server.http_port, "GET", "/rlconfig")
    as_json = await http(server.http_port, "GET", "/rlconfig?format=json")
    assert text.status == 200
    assert text.body.decode().startswith("transport.api_key: 3/hour")
    assert as_json.json()["domains"][0]["domain"] == "transport"


async def test_unknown_paths_are_404_and_wrong_methods_405(start_server: StartServer) -> None:
    """Only the listed endpoints exist; a wrong method says which ones are allowed."""
    server = await start_server()
    missing = await http(server.http_port, "GET", "/stats")
    wrong = await http(server.http_port, "GET", "/json")
    assert missing.status == 404
    assert (wrong.status, wrong.headers["allow"]) == (405, "POST")


async def test_keep_alive_and_chunked_bodies_work_on_one_connection(
    start_server: StartServer,
) -> None:
    """Two requests on one connection: a chunked POST /json, then a HEAD /healthcheck."""
    server = await start_server()
    reader, writer = await asyncio.open_connection(HOST, server.http_port)
    try:
        half = len(ONE_KEY) // 2
        chunks = (
            f"{half:x}\r\n".encode()
            + ONE_KEY[:half]
            + b"\r\n"
            + f"{len(ONE_KEY) - half:x}\r\n".encode()
            + ONE_KEY[half:]
            + b"\r\n0\r\n\r\n"
        )
        head = b"POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        writer.write(head + chunks)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(parse_reply(head).headers["content-length"])
        first = parse_reply(head + await reader.readexactly(length))
        writer.write(b"HEAD /healthcheck HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        second = parse_reply(await reader.read())
    finally:
        writer.close()
    assert first.status == 200 and first.json()["overallCode"] == "OK"
    assert first.headers.get("connection", "keep-alive") == "keep-alive"  # HTTP/1.1's default
    assert (second.status, second.body, second.headers["content-length"]) == (200, b"", "3")


async def test_a_malformed_request_line_is_400(start_server: StartServer) -> None:
    """Garbage instead of HTTP gets 400 and the connection closed, not a crash."""
    server = await start_server()
    reader, writer = await asyncio.open_connection(HOST, server.http_port)
    writer.write(b"HELLO\r\n\r\n")
    reply = parse_reply(await reader.read())
    writer.close()
    assert reply.status == 400
    assert (await http(server.http_port, "GET", "/healthcheck")).status == 200

"""Fuzzing the HTTP headers ratewarden reads: X-Forwarded-For, Forwarded, Idempotency-Key, and
the client's Retry-After / RateLimit / X-RateLimit-* parsing.

Three levels: ``ClientIP`` (pure: any header text gives None or an address that
was really in the request, and a client behind no trusted proxy cannot pick its
own identity), the full ASGI stack (a Starlette app behind
``IdempotencyMiddleware`` and ``RateLimitMiddleware``, driven in-process by
httpx with arbitrary header bytes: never a 500), and ``retry_hint`` (any
headers: None or a finite wait of at least zero, never an exception).
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ratewarden.client import retry_hint
from ratewarden.limiter import AsyncLimiter
from ratewarden.middleware import ClientIP, RateLimitMiddleware, RequestInfo, Rule, RuleSet
from ratewarden.middleware._identity import parse_ip
from ratewarden.middleware.idempotency import IdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncMemoryIdempotencyStore
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TRUSTED = ["10.0.0.0/8", "fd00::/8"]
UNTRUSTED_PEER = "203.0.113.9"

addresses = st.one_of(
    st.ip_addresses().map(str),
    st.sampled_from(
        ["unknown", "_hidden", "[::1]:80", "1.2.3.4:8080", "10.1.2.3", "::ffff:10.0.0.1"]
    ),
)
junk = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=20)
hop = st.one_of(addresses, junk)
xff = st.lists(hop, max_size=6).map(", ".join)
forwarded_element = st.builds(
    lambda value, quoted, extra: (f'for="{value}"' if quoted else f"for={value}") + extra,
    hop,
    st.booleans(),
    st.sampled_from(["", ";proto=https", ";by=10.0.0.1", ';host="a,b"', ";for=1.1.1.1"]),
)
forwarded = st.one_of(st.lists(forwarded_element, max_size=5).map(", ".join), junk)


def request(peer: str | None, headers: dict[str, str]) -> RequestInfo:
    return RequestInfo(method="GET", path="/", peer=peer, headers=headers, raw={})


def mentioned(address: ipaddress.IPv4Address | ipaddress.IPv6Address, text: str) -> bool:
    """Whether ``address`` is one of the hops written in ``text`` (or the peer)."""
    for part in text.replace(";", ",").replace("=", ",").split(","):
        found = parse_ip(part)
        if found is not None and found == address:
            return True
    return False


@SETTINGS
@given(st.sampled_from(["x-forwarded-for", "forwarded"]), st.one_of(xff, forwarded), addresses)
def test_the_client_ip_is_the_peer_or_an_address_from_the_header(
    header: str, value: str, peer: str
) -> None:
    """Any header text: None, or an address that is the peer or appears in the header."""
    extractor = ClientIP(TRUSTED, header=header)  # type: ignore[arg-type]
    info = request(peer, {header: value})
    address = extractor.address(info)
    peer_ip = parse_ip(peer)
    if peer_ip is None:
        assert address is None
        return
    assert address is not None
    assert address == peer_ip or mentioned(address, value), (address, value)
    identity = extractor(info)
    assert identity is not None and identity.startswith("ip:")


@SETTINGS
@given(st.sampled_from(["x-forwarded-for", "forwarded"]), st.one_of(xff, forwarded))
def test_an_untrusted_peer_cannot_choose_its_identity(header: str, value: str) -> None:
    """From a peer that is no trusted proxy, the header is ignored: the identity is the peer."""
    extractor = ClientIP(TRUSTED, header=header)  # type: ignore[arg-type]
    assert extractor(request(UNTRUSTED_PEER, {header: value})) == f"ip:{UNTRUSTED_PEER}"


@SETTINGS
@given(st.lists(hop, max_size=4), st.ip_addresses(v=4).filter(lambda a: not a.is_private))
def test_the_last_untrusted_hop_before_the_proxies_is_the_client(
    spoofed: list[str], client: ipaddress.IPv4Address
) -> None:
    """Whatever a client prepends to X-Forwarded-For, the trusted proxy's own entry wins."""
    extractor = ClientIP(TRUSTED)
    value = ", ".join([*spoofed, str(client), "10.0.0.7"])
    assert extractor(request("10.0.0.1", {"x-forwarded-for": value})) == f"ip:{client}"


# -- the whole ASGI stack, with arbitrary header bytes --------------------------------


async def echo(request: Request) -> Response:
    return JSONResponse({"ok": True, "body": len(await request.body())})


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[asyncio.AbstractEventLoop, httpx.AsyncClient]]:
    """Starlette behind IdempotencyMiddleware and RateLimitMiddleware (per client IP behind
    trusted proxies, 1000/minute on a ManualClock), and an httpx client from 10.0.0.1."""
    app = Starlette(routes=[Route("/orders", echo, methods=["GET", "POST", "PATCH"])])
    rules = RuleSet([Rule("per-ip", "1000/minute", key=ClientIP(TRUSTED))])
    limiter = AsyncLimiter(AsyncMemoryStore(clock=ManualClock()))
    guarded = IdempotencyMiddleware(
        RateLimitMiddleware(app, limiter=limiter, rules=rules), AsyncMemoryIdempotencyStore()
    )
    transport = httpx.ASGITransport(app=guarded, client=("10.0.0.1", 40000))
    loop = asyncio.new_event_loop()
    client = httpx.AsyncClient(transport=transport, base_url="http://ratewarden.test")
    yield loop, client
    loop.run_until_complete(client.aclose())
    loop.close()


header_bytes = st.binary(max_size=64).map(
    lambda raw: bytes(b for b in raw if b >= 0x20 or b == 0x09)
)
#: Status codes the stack answered with, across the examples.
STATUSES: Counter[int] = Counter()
huge = st.builds(lambda n: b"k" * n, st.integers(200, 20_000))


@SETTINGS
@given(
    st.sampled_from(["GET", "POST", "PATCH"]),
    st.one_of(header_bytes, st.sampled_from([b"", b"1.2.3.4", b"unknown"])),
    st.one_of(header_bytes, st.sampled_from([b'for="[::1]:80"', b"for=unknown"])),
    st.one_of(st.none(), header_bytes, huge, st.sampled_from([b"", b" ", b"abc", b"\xff\xfe"])),
    st.binary(max_size=32),
)
@example("POST", b"", b"", b"same-key", b"one")
@example("POST", b"", b"", b"same-key", b"two")  # same key, another body: 422
def test_any_headers_through_the_asgi_stack_never_answer_500(
    stack: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient],
    method: str,
    forwarded_for: bytes,
    forwarded_value: bytes,
    idempotency_key: bytes | None,
    body: bytes,
) -> None:
    """X-Forwarded-For, Forwarded and Idempotency-Key with any bytes a server accepts: the app's
    answer, a 429, or a clear 4xx from the middleware; never a 500."""
    loop, client = stack
    headers = [(b"x-forwarded-for", forwarded_for), (b"forwarded", forwarded_value)]
    if idempotency_key is not None:
        headers.append((b"idempotency-key", idempotency_key))
    reply = loop.run_until_complete(
        client.request(method, "/orders", headers=headers, content=body)
    )
    assert reply.status_code in (200, 400, 409, 413, 422, 429), (reply.status_code, reply.text)
    STATUSES[reply.status_code] += 1
    if reply.status_code == 400:
        assert idempotency_key is not None and reply.content, "a 400 says what was wrong"


def test_the_stack_fuzz_reached_the_app_and_the_key_checks() -> None:
    """The requests above got through to the app, and some keys were refused (400) or
    replayed with another body (422): the middleware's checks were exercised."""
    assert STATUSES[200] > 50 and STATUSES[400] > 0 and STATUSES[422] > 0, dict(STATUSES)


# -- the client's parsing of the server's hints --------------------------------------

numbers = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["0", "1", "1.5", "-1", "1e3", "0x10", "٣", "99999999999999999999", ""]),
)
dates = st.one_of(
    st.datetimes().map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")),
    st.sampled_from(["Wed, 21 Oct 2015 07:28:00 GMT", "Sun, 06 Nov 1994 08:49:37 GMT", "Mon, 99"]),
)
ratelimit_items = st.lists(
    st.builds(
        lambda name, r, t, extra: f'"{name}";r={r};t={t}{extra}',
        st.text(max_size=5),
        numbers,
        numbers,
        st.sampled_from(["", ";pk=:abc:", ';q="a;b"', ";r=0"]),
    ),
    max_size=3,
).map(", ".join)
hint_headers = st.dictionaries(
    st.sampled_from(
        [
            "Retry-After",
            "RateLimit",
            "RateLimit-Policy",
            "X-RateLimit-Reset",
            "X-RateLimit-Remaining",
            "RateLimit-Reset",
            "RateLimit-Remaining",
        ]
    ),
    st.one_of(numbers, dates, ratelimit_items, st.text(max_size=30)),
    max_size=5,
)


@settings(max_examples=500, deadline=None)
@given(hint_headers, st.floats(0, 4e9))
@example({"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, 0.0)
@example({"Retry-After": "Mon, 01 Jan 0001 00:00:00 GMT"}, 1.7e9)
@example({"RateLimit": '"a";r=0;t=99999999999999999999'}, 0.0)
@example({"X-RateLimit-Reset": "1e308", "X-RateLimit-Remaining": "0"}, 0.0)
def test_retry_hint_is_none_or_a_finite_wait(headers: dict[str, str], now: float) -> None:
    """Any combination of hint headers: None or a finite number of seconds >= 0."""
    hint = retry_hint(headers, now)
    assert hint is None or (math.isfinite(hint) and hint >= 0), (headers, hint)

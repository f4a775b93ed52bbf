"""Invariants over random inputs: identities cannot be forged, Retry-After is never early."""

from __future__ import annotations

import asyncio
import ipaddress
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import AsyncLimiter, AsyncMemoryStore
from ratewarden.decision import Decision
from ratewarden.headers import HeaderOptions, retry_after_seconds
from ratewarden.middleware import RequestInfo, Rule, RuleSet, by_api_key, by_client_ip
from ratewarden.middleware._core import drive_async
from ratewarden.testing import DecisionRecorder, ManualClock

TRUSTED = ["10.0.0.0/8", "fd00::/8"]
_NETWORKS = [ipaddress.ip_network(n) for n in TRUSTED]

ipv4 = st.ip_addresses(v=4).map(str)
header_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80)
forwarded_lists = st.lists(st.one_of(ipv4, header_text), max_size=6).map(", ".join)


def _untrusted(address: str) -> bool:
    parsed = ipaddress.ip_address(address)
    return not any(parsed in network for network in _NETWORKS)


@given(peer=ipv4.filter(_untrusted), xff=forwarded_lists, forwarded=header_text)
def test_an_untrusted_peer_is_always_its_own_identity(peer: str, xff: str, forwarded: str) -> None:
    """Whatever forwarding headers an untrusted peer sends, its identity is its own address."""
    for header in ("x-forwarded-for", "forwarded"):
        extract = by_client_ip(TRUSTED, header=header)  # type: ignore[arg-type]
        request = RequestInfo(
            "GET", "/", peer, {"x-forwarded-for": xff, "forwarded": forwarded}, {}
        )
        assert extract(request) == f"ip:{peer}"


@given(
    client=ipv4.filter(_untrusted),
    proxies=st.lists(st.integers(0, 2**24 - 1), min_size=1, max_size=4),
    forged=st.lists(ipv4, max_size=3),
)
def test_behind_trusted_proxies_the_first_untrusted_hop_wins(
    client: str, proxies: list[int], forged: list[str]
) -> None:
    """Anything the client wrote left of its own address never becomes its identity."""
    hops = [str(ipaddress.IPv4Address(0x0A000000 + p)) for p in proxies]
    xff = ", ".join([*forged, client, *hops[:-1]])
    request = RequestInfo("GET", "/", hops[-1], {"x-forwarded-for": xff}, {})
    assert by_client_ip(TRUSTED)(request) == f"ip:{client}"


@given(
    retry=st.floats(0.000_001, 10_000, allow_nan=False),
    jitter=st.floats(0, 100, allow_nan=False),
    draw=st.floats(0, 1, exclude_max=True),
)
def test_retry_after_is_never_early_and_jitter_is_bounded(
    retry: float, jitter: float, draw: float
) -> None:
    """ceil(retry) <= Retry-After <= ceil(retry + jitter), for any draw in [0, 1)."""
    decision = Decision(False, 1, 0, retry, retry)
    options = HeaderOptions(retry_jitter=jitter, random=lambda: draw)
    seconds = retry_after_seconds(decision, options)
    assert seconds is not None
    assert seconds >= retry
    assert math.ceil(retry) <= seconds <= math.ceil(retry + jitter)


_RULES = st.lists(
    st.tuples(
        st.sampled_from(["2/second", "3/minute", "1/second"]),
        st.booleans(),  # shadow
        st.integers(1, 3),  # cost
    ),
    min_size=1,
    max_size=3,
)


@settings(max_examples=60, deadline=None)
@given(
    specs=_RULES,
    steps=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 700_000), st.integers(0, 3)),
        min_size=1,
        max_size=25,
    ),
)
def test_the_plain_and_the_awaited_evaluation_agree(
    specs: list[tuple[str, bool, int]], steps: list[tuple[str, int, int]]
) -> None:
    """``RuleSet.decide`` over ``AsyncLimiter.hit_now`` (what the asyncio middleware runs when
    the store is in process) gives the outcome, headers and shadow report of the generator
    driven by ``await AsyncLimiter.hit``, step for step; the last field of a step switches a
    rule off (the kill switch) or into shadow mode at runtime."""
    rules = [
        Rule(f"r{i}", rate, shadow=shadow, cost=cost)
        for i, (rate, shadow, cost) in enumerate(specs)
    ]
    sides = []
    for _ in range(2):
        clock = ManualClock()
        limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
        sides.append((RuleSet(rules, clock=clock), limiter, clock))
    assert sides[0][1].hit_now is not None

    async def run() -> None:
        for peer, advance_us, switch in steps:
            outcomes = []
            for i, (ruleset, limiter, clock) in enumerate(sides):
                clock.advance(advance_us / 1e6)
                if switch == 1:
                    ruleset.disable("r0")
                elif switch == 2:
                    ruleset.enable("r0")
                elif switch == 3:
                    ruleset.set_shadow("r0", not ruleset.rules[0].shadow)
                request = RequestInfo("GET", "/", peer, {}, {})
                applicable = ruleset.applicable(request)
                if i == 0:
                    outcomes.append(ruleset.decide(request, applicable, limiter.hit_now))
                else:
                    outcomes.append(await drive_async(ruleset.run(request, applicable), limiter))
            assert outcomes[0] == outcomes[1]
        assert sides[0][0].shadow_report() == sides[1][0].shadow_report()

    asyncio.run(run())


class _AwaitedStore(AsyncMemoryStore):
    """The memory store as a limiter sees a network store: no ``hit_now``, awaited."""


_HEADER_LISTS = st.lists(
    st.tuples(
        st.sampled_from([b"x-api-key", b"X-Api-Key", b"x-forwarded-for", b"host"]),
        st.sampled_from([b"k1", b"k2", b"", b" k1 ", b"k\xe9", b"203.0.113.9, 10.0.0.3"]),
    ),
    max_size=4,
)
_CLIENTS = st.one_of(
    st.none(), st.sampled_from([("198.51.100.7", 4000), ("2001:db8::1", 4000), ("10.0.0.2", 1)])
)


def scope_of(
    headers: list[tuple[bytes, bytes]], client: object, **more: object
) -> dict[str, object]:
    """An HTTP scope with these headers and, unless ``client`` is None, this peer."""
    scope: dict[str, object] = {"type": "http", "headers": headers, **more}
    if client is not None:
        scope["client"] = client
    return scope


def builtin_extractors() -> list[Any]:
    """Every built-in extractor, in each of its shapes."""
    return [
        by_api_key(),
        by_api_key("X-Api-Key", hashed=False),
        by_client_ip(),
        by_client_ip(["10.0.0.0/8"]),
        by_client_ip(["10.0.0.0/8"], header="forwarded"),
        by_client_ip(ipv6_prefix=128),
    ]


@settings(max_examples=100, deadline=None)
@given(
    layout=st.sampled_from(["key", "key+ip", "ip-trusted", "raw-key", "default", "none"]),
    requests=st.lists(
        st.tuples(_HEADER_LISTS, _CLIENTS, st.integers(0, 400_000)), min_size=1, max_size=20
    ),
    awaited=st.booleans(),
)
def test_the_scope_path_answers_as_the_request_path(
    layout: str,
    requests: list[tuple[list[tuple[bytes, bytes]], object, int]],
    awaited: bool,
) -> None:
    """``RuleSet.decide_asgi`` (identity read from the scope, no ``RequestInfo``) sends what
    the general path sends, message for message: statuses, headers, bodies; over API keys
    present, empty, repeated or in another case, peers v4, v6 or missing, trusted proxies.
    ``awaited``: a store the limiter awaits (``decide_asgi_async``, no ``hit_now``)."""
    from ratewarden.middleware import RateLimitMiddleware

    rules = {
        "key": [Rule("c", "3/second", key=by_api_key())],
        "key+ip": [
            Rule("ip", "5/second", key=by_client_ip()),
            Rule("c", "2/second", key=by_api_key(), cost=2, fallback="nokey"),
        ],
        "ip-trusted": [Rule("ip", "2/second", key=by_client_ip(["10.0.0.0/8"]))],
        "raw-key": [Rule("c", "2/second", key=by_api_key(hashed=False))],
        "default": [Rule("d", "2/second")],
        "none": [],
    }[layout]
    sides = []
    for plain in (True, False):
        clock = ManualClock()
        ruleset = RuleSet(rules, clock=clock)
        assert ruleset.plain_asgi
        ruleset.plain_asgi = plain

        async def app(scope: object, receive: object, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        recorder = DecisionRecorder()
        store = (_AwaitedStore if awaited else AsyncMemoryStore)(clock=clock)
        limiter = AsyncLimiter(store, on_decision=recorder)
        assert (limiter.hit_now is None) is awaited
        middleware = RateLimitMiddleware(app, limiter=limiter, rules=ruleset)
        sides.append((middleware, clock, recorder))

    async def run() -> None:
        for headers, client, advance_us in requests:
            sent: list[list[object]] = [[], []]
            for i, (middleware, clock, _) in enumerate(sides):
                clock.advance(advance_us / 1e6)
                scope = scope_of(headers, client, method="GET", path="/")

                async def send(message: object, into: list[object] = sent[i]) -> None:
                    into.append(message)

                await middleware(scope, None, send)
            assert sent[0] == sent[1]
        # The same identities were charged, in the same order.
        assert sides[0][2].keys() == sides[1][2].keys()

    asyncio.run(run())


@given(
    headers=st.lists(
        st.tuples(
            st.sampled_from([b"x-api-key", b"X-API-KEY", b"x-forwarded-for", b"forwarded"]),
            st.sampled_from(
                [b"k1", b"", b" k1 ", b"203.0.113.9, 10.0.0.3", b"for=203.0.113.9", b"unknown"]
            ),
        ),
        max_size=4,
    ),
    client=st.one_of(
        st.none(),
        st.sampled_from([("10.0.0.2", 1), ("198.51.100.7", 2), ("2001:db8::1", 3), ("", 4)]),
    ),
)
def test_each_extractor_reads_the_scope_as_it_reads_the_request(
    headers: list[tuple[bytes, bytes]], client: object
) -> None:
    """The ``asgi`` twin of every built-in extractor equals the extractor over ``from_asgi``."""
    from ratewarden.middleware._request import from_asgi

    scope = scope_of(headers, client)
    for extract in builtin_extractors():
        assert extract.asgi(scope) == extract(from_asgi(scope)), extract  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(
    headers=st.lists(
        st.tuples(
            st.sampled_from([b"x-api-key", b"X-API-KEY", b"x-forwarded-for", b"host"]),
            st.one_of(
                st.sampled_from([b"k1", b"", b" k1 ", b"k\xe9", b"203.0.113.9, 10.0.0.3"]),
                st.sampled_from([b"k1", b"k2"]).map(bytearray),  # unhashable: not remembered
            ),
        ),
        max_size=4,
    ),
    client=st.one_of(
        st.none(),
        st.sampled_from([("10.0.0.2", 1), ("198.51.100.7", 2), ("2001:db8::1", 3), ("", 4)]),
    ),
    fallback=st.sampled_from(["anonymous", "nokey"]),
)
def test_each_extractors_scope_key_is_prefix_and_its_asgi_identity(
    headers: list[tuple[bytes, bytes]], client: object, fallback: str
) -> None:
    """``scope_keys(prefix, fallback)``, the one-rule scope path's store key (remembered per
    header value or peer), is ``prefix + (extractor.asgi(scope) or fallback)``, the first
    time and from memory alike."""
    scope = scope_of(headers, client)
    for extract in builtin_extractors():
        scope_key = extract.scope_keys("r:", fallback)
        expected = "r:" + (extract.asgi(scope) or fallback)
        assert scope_key(scope) == expected, extract
        assert scope_key(scope) == expected, extract  # now remembered


def test_a_scope_keys_memory_starts_over_when_full_and_stays_right() -> None:
    """5,000 distinct API keys through one rule's scope key (4,096 remembered, then the table
    starts over): every key is the extractor's, before and after."""
    extract = by_api_key()
    scope_key = extract.scope_keys("c:", "anonymous")

    def scope(value: bytes) -> dict[str, object]:
        return {"type": "http", "headers": [(b"x-api-key", value)]}

    first = scope_key(scope(b"k-0"))
    for i in range(5000):
        assert scope_key(scope(b"k-%d" % i)) == "c:" + str(extract.asgi(scope(b"k-%d" % i)))
    assert scope_key(scope(b"k-0")) == first

"""The RateLimit field's ``t`` as the middleware sends it: draft-11's effective window.

draft-ietf-httpapi-ratelimit-headers-11 defines ``t`` as the seconds within which
the client can use no more than ``r``, and says a response carrying both
``Retry-After`` and ``RateLimit`` should not have ``Retry-After`` point earlier
than the end of that window. draft-10's ``t`` is the time until the quota is
whole again, and stays so when that draft is configured. The fields are read
back with the independent RFC 8941 parser in ``_sfv``.
"""

from __future__ import annotations

import math

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, MemoryStore, Rate
from ratewarden.algorithms import ALGORITHMS
from ratewarden.decision import Decision
from ratewarden.headers import HeaderOptions, layer_names
from ratewarden.middleware import RateLimitMiddleware, RequestInfo, Rule, RuleSet
from ratewarden.testing import ManualClock
from tests.middleware._sfv import Item, parse_list


async def _app(scope: object, receive: object, send: object) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]


def _client(ruleset: RuleSet, clock: ManualClock) -> httpx.AsyncClient:
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    app = RateLimitMiddleware(_app, limiter=limiter, rules=ruleset)
    transport = httpx.ASGITransport(app=app, client=("198.51.100.4", 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def _state(response: httpx.Response) -> dict[str, object]:
    (item,) = parse_list(response.headers["ratelimit"])
    assert item.value == "per-ip"
    return item.params


async def test_the_issues_example_t_is_the_time_to_the_next_unit() -> None:
    """Issue #15: ``Rule("per-ip", "3/minute")`` (GCRA). Each allowed request shows t=20, the
    next unit's return (not 20/40/60 s to full); the 4th gets 429, Retry-After: 20 and t=20;
    19 s later Retry-After: 1 and t=1; 20 s later it passes."""
    clock = ManualClock()
    ruleset = RuleSet([Rule("per-ip", "3/minute")], clock=clock)
    async with _client(ruleset, clock) as client:
        first = [await client.get("/") for _ in range(4)]
        clock.advance(19)
        early = await client.get("/")
        clock.advance(1)
        later = await client.get("/")
    assert [r.status_code for r in first] == [200, 200, 200, 429]
    assert [_state(r) for r in first] == [
        {"r": 2, "t": 20},
        {"r": 1, "t": 20},
        {"r": 0, "t": 20},
        {"r": 0, "t": 20},
    ]
    assert first[3].headers["retry-after"] == "20"
    assert early.status_code == 429
    assert (early.headers["retry-after"], _state(early)) == ("1", {"r": 0, "t": 1})
    assert later.status_code == 200 and _state(later) == {"r": 0, "t": 20}


async def test_draft_10_keeps_its_own_t_the_time_until_whole() -> None:
    """Configured for draft-10, t stays that draft's: 20, 40, 60 s until the quota is whole;
    Retry-After is still the exact retry time, 20 s (that draft's t is no effective window)."""
    clock = ManualClock()
    ruleset = RuleSet(
        [Rule("per-ip", "3/minute")], clock=clock, headers=HeaderOptions(draft="draft-10")
    )
    async with _client(ruleset, clock) as client:
        responses = [await client.get("/") for _ in range(4)]
    assert [_state(r)["t"] for r in responses] == [20, 40, 60, 60]
    assert responses[3].headers["retry-after"] == "20"


#: One rate or two, with fractional emission intervals and a separate burst.
RATE_SETS = [
    (Rate.parse("3/minute"),),
    (Rate.parse("7/1500ms"),),
    (Rate.parse("10/second", burst=4),),
    (Rate.parse("4/second"), Rate.parse("9/minute")),
    (Rate.parse("2/second", burst=3), Rate.parse("100/hour")),
]
WINDOWED = ("fixed_window", "sliding_window", "sliding_log")


def _params(item: Item) -> dict[str, int]:
    """An item's parameters, every one a non-negative Integer (not a Decimal or String)."""
    for value in item.params.values():
        assert type(value) is int and value >= 0
    return item.params  # type: ignore[return-value]


@settings(max_examples=300, deadline=None)
@given(
    algorithm=st.sampled_from(sorted(ALGORITHMS)),
    which=st.integers(0, len(RATE_SETS) - 1),
    history=st.lists(
        st.tuples(
            st.sampled_from([0, 0, 1, 1_000, 250_000, 700_000, 1_000_000, 9_000_000]),
            st.sampled_from([0, 1, 1, 1, 2, 5]),
        ),
        min_size=1,
        max_size=25,
    ),
    draft=st.sampled_from(["draft-11", "draft-10"]),
    all_policies=st.booleans(),
    jitter=st.sampled_from([0.0, 0.0, 0.3, 4.0]),
    draw=st.floats(0, 0.999999),
)
def test_fields_parse_as_rfc_8941_lists_and_retry_after_is_never_before_t(
    algorithm: str,
    which: int,
    history: list[tuple[int, int]],
    draft: str,
    all_policies: bool,
    jitter: float,
    draw: float,
) -> None:
    """Every algorithm, one rate or two, any history and cost, either draft, with or without
    all_policies and jitter: both fields are RFC 8941 Lists naming the same policies, r and t
    are Integers, t is the draft's (draft-11: ceil(refill_after), draft-10: ceil(reset_after))
    and, under draft-11, Retry-After is never earlier than the t of a policy with r=0."""
    rates = RATE_SETS[which]
    if algorithm in WINDOWED:
        rates = tuple(Rate(rate.limit, rate.period) for rate in rates)
    clock = ManualClock()
    limiter = Limiter(MemoryStore(clock=clock), algorithm=algorithm)
    options = HeaderOptions(
        draft=draft, all_policies=all_policies, retry_jitter=jitter, random=lambda: draw
    )
    ruleset = RuleSet(
        [Rule("api", list(rates), cost=lambda request: int(request.headers["x-cost"]))],
        clock=clock,
        headers=options,
    )
    decisions: list[Decision] = []

    def hit(key: str, rates: object, cost: int, *, shadow: bool = False) -> Decision:
        decisions.append(limiter.hit(key, rates, cost, shadow=shadow))  # type: ignore[arg-type]
        return decisions[-1]

    for step_us, cost in history:
        clock.advance_us(step_us)
        request = RequestInfo("GET", "/", "198.51.100.4", {"x-cost": str(cost)}, {})
        outcome = ruleset.decide(request, ruleset.applicable(request), hit)
        decision = decisions[-1]
        headers = dict(outcome.headers)
        assert outcome.blocked is not decision.allowed
        policies = parse_list(headers["RateLimit-Policy"])
        states = parse_list(headers["RateLimit"])
        assert [p.value for p in policies] == [s.value for s in states]
        layers = dict(layer_names("api", decision))
        if not all_policies:
            assert len(states) == 1
        for policy, state in zip(policies, states, strict=True):
            layer = layers[state.value]  # type: ignore[index]
            assert set(_params(policy)) == {"q", "w"}
            assert set(_params(state)) == {"r", "t"}
            window = layer.refill_after if draft == "draft-11" else layer.reset_after
            assert state.params["t"] == max(0, math.ceil(window))
            if draft == "draft-11":
                assert state.params["t"] >= 1  # a window is never "now"
        if not decision.allowed and "Retry-After" in headers:
            retry = int(headers["Retry-After"])
            assert retry >= math.ceil(decision.retry_after)
            if draft == "draft-11":
                exhausted = [s.params["t"] for s in states if s.params["r"] == 0]
                assert exhausted and retry >= max(exhausted)  # type: ignore[type-var]

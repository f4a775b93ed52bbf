"""ratewarden.headers: the RateLimit, X-RateLimit-*, Retry-After and problem+json renderings."""

from __future__ import annotations

import json
import math

import pytest

from ratewarden import ConfigurationError, Limiter, MemoryStore, Rate
from ratewarden.decision import Decision
from ratewarden.headers import (
    HeaderOptions,
    ceil_seconds,
    denied_headers,
    problem_body,
    rate_limit_headers,
    retry_after_seconds,
    sf_string,
    split_outside_quotes,
    window,
)
from ratewarden.testing import ManualClock
from tests.middleware._sfv import parse_list

NOW = 1_700_000_000.0


def _limiter() -> tuple[Limiter, ManualClock]:
    clock = ManualClock(NOW)
    return Limiter(MemoryStore(clock=clock)), clock


def _exhaust(limiter: Limiter, key: str, rates: list[Rate], count: int) -> Decision:
    decision = limiter.hit(key, rates)
    for _ in range(count - 1):
        decision = limiter.hit(key, rates)
    return decision


def test_draft_fields_parse_as_structured_lists_with_q_w_r_t() -> None:
    """RateLimit-Policy and RateLimit are RFC 8941 Lists naming the policy, with q/w and r/t."""
    limiter, _ = _limiter()
    decision = _exhaust(limiter, "k", [Rate.parse("100/minute")], 28)
    found = dict(rate_limit_headers("burst", decision, HeaderOptions(), now=NOW))
    (policy,) = parse_list(found["RateLimit-Policy"])
    (state,) = parse_list(found["RateLimit"])
    assert policy.value == "burst" and policy.params == {"q": 100, "w": 60}
    assert state.value == "burst"
    assert state.params["r"] == 72
    # draft-11's t is the effective window: once the 72 are used, the next unit of
    # 100/minute comes back one emission interval (0.6 s) later.
    assert state.params["t"] == 1
    # draft-10's t: 28 requests at one instant put the key 28 * 0.6 s = 16.8 s from full.
    older = dict(rate_limit_headers("burst", decision, HeaderOptions(draft="draft-10"), now=NOW))
    assert parse_list(older["RateLimit"])[0].params == {"r": 72, "t": 17}


def test_partition_key_is_a_byte_sequence_on_both_fields() -> None:
    """With partition_key on, pk is an RFC 8941 Byte Sequence carrying the given bytes."""
    limiter, _ = _limiter()
    decision = limiter.hit("k", Rate.parse("10/second"))
    options = HeaderOptions(partition_key=True)
    found = dict(rate_limit_headers("p", decision, options, now=NOW, partition=b"\x00\xffabc"))
    assert parse_list(found["RateLimit-Policy"])[0].params["pk"] == b"\x00\xffabc"
    assert parse_list(found["RateLimit"])[0].params["pk"] == b"\x00\xffabc"


def test_all_policies_lists_every_layer_and_default_lists_the_binding_one() -> None:
    """Two rates on one rule: the default names the binding layer; all_policies lists both."""
    limiter, _ = _limiter()
    rates = [Rate.parse("10/second"), Rate.parse("9/hour")]
    decision = _exhaust(limiter, "k", rates, 8)
    one = dict(rate_limit_headers("api", decision, HeaderOptions(), now=NOW))
    (policy,) = parse_list(one["RateLimit-Policy"])
    assert policy.value == "api.2" and policy.params == {"q": 9, "w": 3600}
    assert parse_list(one["RateLimit"])[0].params["r"] == 1
    both = dict(rate_limit_headers("api", decision, HeaderOptions(all_policies=True), now=NOW))
    names = [item.value for item in parse_list(both["RateLimit-Policy"])]
    assert names == ["api.1", "api.2"]
    assert [i.params["q"] for i in parse_list(both["RateLimit-Policy"])] == [10, 9]
    assert [i.params["r"] for i in parse_list(both["RateLimit"])] == [2, 1]


def test_all_policies_denial_marks_only_the_exhausted_rate_with_r_0() -> None:
    """2/second and 100/hour (GCRA), the third request of an instant: the per-second rate denies
    (r=0, its next unit in 0.5 s) and the hour keeps its 98 (nothing was taken from it; its next
    unit is 36 s after they are used). Retry-After is the 1 s the denial needs, not the hour's t."""
    limiter, _ = _limiter()
    rates = [Rate.parse("2/second"), Rate.parse("100/hour")]
    denied = _exhaust(limiter, "k", rates, 3)
    assert not denied.allowed
    options = HeaderOptions(all_policies=True)
    found = dict(rate_limit_headers("api", denied, options, now=NOW))
    assert [(i.value, i.params) for i in parse_list(found["RateLimit"])] == [
        ("api.1", {"r": 0, "t": 1}),
        ("api.2", {"r": 98, "t": 36}),
    ]
    assert retry_after_seconds(denied, options) == 1


def test_denied_decision_reports_zero_remaining() -> None:
    """A denial reports r=0 and X-RateLimit-Remaining 0, whatever the store counted."""
    limiter, _ = _limiter()
    decision = _exhaust(limiter, "k", [Rate.parse("3/minute")], 4)
    assert not decision.allowed
    options = HeaderOptions(legacy=True)
    found = dict(rate_limit_headers("p", decision, options, now=NOW))
    assert parse_list(found["RateLimit"])[0].params["r"] == 0
    assert found["X-RateLimit-Remaining"] == "0"


def test_legacy_reset_as_delta_and_as_epoch_rounded_up() -> None:
    """X-RateLimit-Reset: ceil(reset_after) as a delta, ceil(now + reset_after) as epoch."""
    limiter, clock = _limiter()
    clock.advance(0.25)
    decision = _exhaust(limiter, "k", [Rate.parse("3/10s")], 1)
    assert math.isclose(decision.reset_after, 10 / 3, rel_tol=1e-6)
    delta = dict(rate_limit_headers("p", decision, HeaderOptions(legacy=True), now=clock.now()))
    epoch = dict(
        rate_limit_headers(
            "p", decision, HeaderOptions(legacy=True, reset="epoch"), now=clock.now()
        )
    )
    assert delta["X-RateLimit-Reset"] == "4"
    assert epoch["X-RateLimit-Reset"] == str(math.ceil(NOW + 0.25 + 10 / 3))
    assert delta["X-RateLimit-Limit"] == "3"


def test_legacy_reset_with_two_rates_is_the_reported_rates() -> None:
    """10/second and 9/hour, two requests: Limit and Remaining are the hour's (it has less
    room), so Reset is the hour's too, and with the second rate binding it is the second's."""
    limiter, _ = _limiter()
    options = HeaderOptions(legacy=True)
    hour = _exhaust(limiter, "k", [Rate.parse("10/second"), Rate.parse("9/hour")], 2)
    found = dict(rate_limit_headers("api", hour, options, now=NOW))
    assert (found["X-RateLimit-Limit"], found["X-RateLimit-Remaining"]) == ("9", "7")
    assert found["X-RateLimit-Reset"] == str(ceil_seconds(hour.layers[1].reset_after))
    second = _exhaust(limiter, "j", [Rate.parse("3/second"), Rate.parse("90/hour")], 2)
    found = dict(rate_limit_headers("api", second, options, now=NOW))
    assert (found["X-RateLimit-Limit"], found["X-RateLimit-Remaining"]) == ("3", "1")
    assert found["X-RateLimit-Reset"] == "1"  # not the hour's 80 s


def test_github_used_and_resource() -> None:
    """github=True adds X-RateLimit-Used (capacity - remaining) and X-RateLimit-Resource."""
    limiter, _ = _limiter()
    decision = _exhaust(limiter, "k", [Rate.parse("60/hour")], 7)
    found = dict(
        rate_limit_headers("core", decision, HeaderOptions(legacy=True, github=True), now=NOW)
    )
    assert found["X-RateLimit-Used"] == "7"
    assert found["X-RateLimit-Remaining"] == "53"
    assert found["X-RateLimit-Resource"] == "core"


def test_draft_off_renders_no_draft_fields() -> None:
    """The version switch set to None turns the draft fields off."""
    limiter, _ = _limiter()
    decision = limiter.hit("k", Rate.parse("1/second"))
    assert rate_limit_headers("p", decision, HeaderOptions(draft=None), now=NOW) == []


def test_retry_after_rounds_up_and_is_never_early() -> None:
    """Retry-After is the exact retry time rounded up to whole seconds."""
    limiter, clock = _limiter()
    rates = [Rate.parse("100/minute", burst=20)]
    denied = _exhaust(limiter, "k", rates, 21)
    assert not denied.allowed and math.isclose(denied.retry_after, 0.6)
    assert retry_after_seconds(denied, HeaderOptions()) == 1
    clock.advance(0.599)
    assert not limiter.hit("k", rates).allowed
    clock.advance(0.001)
    assert limiter.hit("k", rates).allowed


def test_retry_jitter_is_bounded_and_uses_the_given_random_source() -> None:
    """Jitter adds random() * retry_jitter seconds: 0 at the low end, below the bound at the top."""
    limiter, _ = _limiter()
    denied = _exhaust(limiter, "k", [Rate.parse("1/minute")], 2)
    assert denied.retry_after == 60
    low = HeaderOptions(retry_jitter=10, random=lambda: 0.0)
    high = HeaderOptions(retry_jitter=10, random=lambda: 0.999999)
    mid = HeaderOptions(retry_jitter=10, random=lambda: 0.35)
    assert retry_after_seconds(denied, low) == 60
    assert retry_after_seconds(denied, high) == 70
    assert retry_after_seconds(denied, mid) == 64


def test_broken_random_source_is_clamped_never_stretching_the_bound() -> None:
    """A random source outside [0, 1) is clamped (no 500 per denial), never past the bound."""
    limiter, _ = _limiter()
    denied = _exhaust(limiter, "k", [Rate.parse("1/minute")], 2)
    plain = retry_after_seconds(denied, HeaderOptions())
    assert plain is not None
    wild = retry_after_seconds(denied, HeaderOptions(retry_jitter=5, random=lambda: 1.5))
    assert wild == plain + 5


def test_cost_above_capacity_has_no_retry_after() -> None:
    """A request that can never be allowed gets no Retry-After, and a body that says why."""
    limiter, _ = _limiter()
    denied = limiter.hit("k", Rate.parse("5/minute"), cost=6)
    assert math.isinf(denied.retry_after)
    assert retry_after_seconds(denied, HeaderOptions()) is None
    body = problem_body("p", None)
    names = [name for name, _ in denied_headers(None, body)]
    assert "Retry-After" not in names
    assert "more than" in json.loads(body)["detail"]


def test_cost_above_capacity_reports_what_is_left_and_no_reset() -> None:
    """Nothing is taken by a request that can never be allowed: 10/minute and 15/hour with 3
    used, a cost of 20 reports r=7 and r=12 (no r=0, so no policy asks for a wait), the legacy
    Remaining 7 and no X-RateLimit-Reset, whose 0 would say "retry at once"."""
    limiter, _ = _limiter()
    rates = [Rate.parse("10/minute"), Rate.parse("15/hour")]
    limiter.hit("k", rates, cost=3)
    denied = limiter.hit("k", rates, cost=20)
    assert math.isinf(denied.retry_after)
    for options in (
        HeaderOptions(legacy=True, github=True),
        HeaderOptions(reset="epoch", legacy=True),
    ):
        found = dict(rate_limit_headers("api", denied, options, now=NOW))
        assert parse_list(found["RateLimit"])[0].params["r"] == 7
        assert found["X-RateLimit-Remaining"] == "7"
        assert "X-RateLimit-Reset" not in found
    options = HeaderOptions(all_policies=True, draft="draft-10")
    found = dict(rate_limit_headers("api", denied, options, now=NOW))
    assert [i.params["r"] for i in parse_list(found["RateLimit"])] == [7, 12]


def test_problem_body_and_denied_headers() -> None:
    """The 429 body is problem+json with status 429; the response is not cacheable."""
    body = problem_body("contract", 3)
    problem = json.loads(body)
    assert problem["status"] == 429 and problem["title"] == "Too Many Requests"
    assert problem["retry_after"] == 3 and problem["policy"] == "contract"
    found = dict(denied_headers(3, body))
    assert found["Retry-After"] == "3"
    assert found["Cache-Control"] == "no-store"
    assert found["Content-Type"] == "application/problem+json"
    assert found["Content-Length"] == str(len(body))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100/minute", (100, 60)),
        ("10/100ms", (100, 1)),
        ("3/1500ms", (4, 2)),
        ("1/day", (1, 86400)),
    ],
)
def test_window_never_promises_more_than_the_rate(text: str, expected: tuple[int, int]) -> None:
    """Sub-second and fractional periods: a whole-second window, the quota rounded down."""
    assert window(Rate.parse(text)) == expected


def test_policy_names_are_escaped_strings() -> None:
    """Quotes, backslashes and non-ASCII in a policy name still give a valid String."""
    assert parse_list(sf_string('a"b\\c\u00e9'))[0].value == 'a"b\\c?'


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"draft": "draft-99"}, "draft-99"),
        ({"reset": "soon"}, "soon"),
        ({"github": True}, "legacy=True"),
        ({"retry_jitter": -1}, "retry_jitter"),
        ({"retry_jitter": math.inf}, "retry_jitter"),
    ],
)
def test_bad_options_are_configuration_errors(kwargs: dict[str, object], message: str) -> None:
    """Each bad option names itself in a ConfigurationError."""
    with pytest.raises(ConfigurationError, match=message):
        HeaderOptions(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "separator", "parts"),
    [
        ('"a";r=0;t=5, "b";r=1', ",", ['"a";r=0;t=5', ' "b";r=1']),
        ('"a,b";r=0, "c"', ",", ['"a,b";r=0', ' "c"']),
        (r'"a\"b;c";t=1', ";", [r'"a\"b;c"', "t=1"]),
        ('for="[::1]:80";by=x', ";", ['for="[::1]:80"', "by=x"]),
        ("", ",", [""]),
        ('"open, never closed', ",", ['"open, never closed']),
    ],
)
def test_split_outside_quotes_cuts_only_between_quoted_strings(
    text: str, separator: str, parts: list[str]
) -> None:
    """A separator inside a quoted string (escaped quotes included) does not cut; quotes and
    blanks are kept; an unclosed quote runs to the end."""
    assert split_outside_quotes(text, separator) == parts

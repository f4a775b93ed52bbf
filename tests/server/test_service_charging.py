"""ShouldRateLimit: who is charged, the overall code, shadow and quota, replaces, overrides."""

from __future__ import annotations

from collections.abc import Callable

from envoy.service.ratelimit.v3 import rls_pb2
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden.server import config
from ratewarden.server.service import RateLimitService
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock
from tests.server.conftest import OK, OVER, SERVICE_RULES, Harness, Response, desc

Make = Callable[..., Harness]
MINUTE = Response.RateLimit.MINUTE
HOUR = Response.RateLimit.HOUR


# ---------------------------------------------------------------- charging


def denied_beside_a(h: Harness, other: str) -> int:
    """Exhaust a, then ask for ``other`` and a together: denied by a alone (``other`` has room).
    What ``other`` has left afterwards."""
    h.ask(desc(("a", "x")), hits=2)
    assert h.codes(desc((other, "y")), desc(("a", "x"))) == [OVER, OK, OVER]
    return h.remaining((other, "y"))


def test_a_denied_request_charges_none_of_its_descriptors(rls: Make) -> None:
    """a is exhausted: a request with a and b is denied and b keeps all 5."""
    assert denied_beside_a(rls(SERVICE_RULES), "b") == 5


def test_an_allowed_request_charges_every_descriptor(rls: Make) -> None:
    """When nothing denies, every descriptor is charged its hits."""
    h = rls(SERVICE_RULES)
    assert h.codes(desc(("a", "x")), desc(("b", "y"))) == [OK, OK, OK]
    assert (h.remaining(("a", "x")), h.remaining(("b", "y"))) == (1, 4)


def test_charge_denied_restores_the_old_per_descriptor_charging(rls: Make) -> None:
    """charge_denied=True: b is charged although a denied the request."""
    assert denied_beside_a(rls(SERVICE_RULES, charge_denied=True), "b") == 4


def test_a_denied_descriptor_reports_its_own_wait_and_the_others_their_room(rls: Make) -> None:
    """In a denied request the over descriptor says when to retry; b shows its untouched room."""
    h = rls(SERVICE_RULES)
    h.clock.advance(20)
    h.ask(desc(("a", "x")), hits=2)
    response = h.ask(desc(("a", "x")), desc(("b", "y")))
    over, fine = response.statuses
    assert (over.code, over.limit_remaining, over.duration_until_reset.seconds) == (OVER, 0, 40)
    assert (fine.code, fine.limit_remaining) == (OK, 5)


def test_an_over_limit_status_reports_nothing_remaining_as_its_header_does(rls: Make) -> None:
    """b at 1 of 5 asked for 5 more: OVER_LIMIT with limit_remaining 0, as upstream and as the
    same answer's RateLimit-Remaining; the denied hits are not charged (b keeps its 4)."""
    h = rls(SERVICE_RULES, response_headers="legacy")
    h.ask(desc(("b", "y")))
    response = h.ask(desc(("c", "y")), desc(("b", "y")), hits=5)
    assert [status.code for status in response.statuses] == [OK, OVER]
    assert response.statuses[1].limit_remaining == 0
    headers = {header.key: header.value for header in response.response_headers_to_add}
    assert headers["RateLimit-Remaining"] == "0"
    assert h.remaining(("b", "y")) == 4


def test_a_request_past_the_whole_limit_reports_nothing_remaining(rls: Make) -> None:
    """More hits than the limit on an untouched counter, enforcing (b, 6 of 5) or in shadow
    mode (shadow, 2 of 1): limit_remaining 0 either way, the shadow rule's code OK."""
    h = rls(SERVICE_RULES)
    for key, hits, code in (("b", 6, OVER), ("shadow", 2, OK)):
        (status,) = h.ask(desc((key, "y"), hits=hits)).statuses
        assert (status.code, status.limit_remaining) == (code, 0)


def test_a_zero_limit_denies_without_charging_the_others(rls: Make) -> None:
    """requests_per_unit: 0 next to b: denied, and b is only looked at."""
    h = rls(SERVICE_RULES)
    assert h.codes(desc(("zero", "z")), desc(("b", "y"))) == [OVER, OVER, OK]
    assert h.remaining(("b", "y")) == 5


def test_beside_a_zero_limit_a_full_counter_reports_its_own_denial(rls: Make) -> None:
    """a is full: next to zero it is OVER_LIMIT with remaining 0 and its retry time, as next to
    any other denial (not looked at with 0 hits: OK), and b, with room, is charged nothing."""
    h = rls(SERVICE_RULES)
    h.clock.advance(20)
    h.ask(desc(("a", "x")), hits=2)
    response = h.ask(desc(("zero", "z")), desc(("a", "x")), desc(("b", "y")))
    codes = [response.overall_code, *(status.code for status in response.statuses)]
    assert codes == [OVER, OVER, OVER, OK]
    full = response.statuses[1]
    assert (full.limit_remaining, full.duration_until_reset.seconds) == (0, 40)
    assert (h.remaining(("a", "x")), h.remaining(("b", "y"))) == (0, 5)


def test_charge_denied_charges_each_descriptor_beside_a_zero_limit(rls: Make) -> None:
    """charge_denied=True: zero denies, and b is charged on its own each time, as when another
    descriptor denies; once b is full it is OVER_LIMIT too."""
    h = rls(SERVICE_RULES, charge_denied=True)
    for left in (4, 3, 2, 1, 0):
        response = h.ask(desc(("zero", "z")), desc(("b", "y")))
        assert [s.code for s in response.statuses] == [OVER, OK]
        assert response.statuses[1].limit_remaining == left
    assert h.codes(desc(("zero", "z")), desc(("b", "y"))) == [OVER, OVER, OVER]
    assert h.remaining(("b", "y")) == 0


def test_two_descriptors_on_one_counter_need_room_for_both(rls: Make) -> None:
    """Twice (a, x) with one hit left: denied as a whole and nothing is charged."""
    h = rls(SERVICE_RULES)
    h.ask(desc(("a", "x")))
    assert h.codes(desc(("a", "x")), desc(("a", "x")), desc(("b", "y")))[0] == OVER
    assert (h.remaining(("a", "x")), h.remaining(("b", "y"))) == (1, 5)
    assert h.codes(desc(("a", "x")), desc(("b", "y"))) == [OK, OK, OK]


# ---------------------------------------------------------------- hits_addend


def test_request_hits_addend_zero_means_one(rls: Make) -> None:
    """hits_addend 0 on the request counts one hit; 2 counts two."""
    h = rls(SERVICE_RULES)
    assert h.ask(desc(("b", "y")), hits=0).statuses[0].limit_remaining == 4
    assert h.ask(desc(("b", "y")), hits=2).statuses[0].limit_remaining == 2


def test_descriptor_hits_addend_overrides_the_request(rls: Make) -> None:
    """A descriptor's own hits_addend wins over the request's."""
    h = rls(SERVICE_RULES)
    response = h.ask(desc(("b", "y"), hits=3), desc(("b", "z")), hits=2)
    assert [s.limit_remaining for s in response.statuses] == [2, 3]


def test_a_descriptor_asked_again_counts_the_hits_of_each_request(rls: Make) -> None:
    """The same entries with their own hits_addend, then without, then with the request's:
    each request counts its own hits, whatever the service remembers of the descriptor."""
    h = rls(SERVICE_RULES)
    assert h.ask(desc(("b", "y"), hits=3)).statuses[0].limit_remaining == 2
    assert h.ask(desc(("b", "y")), hits=1).statuses[0].limit_remaining == 1
    assert h.ask(desc(("b", "y"), hits=3)).overall_code == OVER
    assert h.remaining(("b", "y")) == 1


def test_descriptor_hits_addend_zero_checks_without_consuming(rls: Make) -> None:
    """hits_addend 0 on a descriptor reports the state and consumes nothing."""
    h = rls(SERVICE_RULES)
    h.ask(desc(("a", "x")), hits=2)
    check = h.ask(desc(("a", "x"), hits=0))
    assert check.overall_code == OK
    assert check.statuses[0].limit_remaining == 0
    assert h.ask(desc(("b", "y"), hits=0)).statuses[0].limit_remaining == 5


def test_hits_above_the_limit_are_denied_and_consume_nothing(rls: Make) -> None:
    """A request asking for more hits than the limit is over, and the counter stays as it was."""
    h = rls(SERVICE_RULES)
    assert h.codes(desc(("b", "y")), hits=6) == [OVER, OVER]
    assert h.remaining(("b", "y")) == 5


# ---------------------------------------------------------------- overall code


def test_shadow_mode_reports_ok_while_counting(rls: Make) -> None:
    """A shadow_mode rule over its limit answers OK and is reported as shadowed."""
    h = rls(SERVICE_RULES)
    assert h.codes(desc(("shadow", "s"))) == [OK, OK]
    assert h.codes(desc(("shadow", "s"))) == [OK, OK]
    last = h.hooks.outcomes[-1]
    assert (last.over_limit, last.shadowed) == (True, True)


def test_a_shadow_denial_does_not_stop_the_others_being_charged(rls: Make) -> None:
    """The shadow rule is not enforced, so the request passes and b is charged."""
    h = rls(SERVICE_RULES)
    h.ask(desc(("shadow", "s")))
    assert h.codes(desc(("shadow", "s")), desc(("b", "y"))) == [OK, OK, OK]
    assert h.remaining(("b", "y")) == 4


def test_global_shadow_makes_the_overall_code_ok(rls: Make) -> None:
    """shadow=True: overall OK, the descriptor status still says OVER_LIMIT."""
    h = rls(SERVICE_RULES, shadow=True)
    h.ask(desc(("a", "x")), hits=2)
    assert h.codes(desc(("a", "x"))) == [OK, OVER]


def test_global_shadow_counts_exactly_as_enforcing_would(rls: Make) -> None:
    """Under global shadow a request that would be denied charges nothing, as when enforcing."""
    h = rls(SERVICE_RULES, shadow=True)
    h.ask(desc(("a", "x")), hits=2)
    h.ask(desc(("a", "x")), desc(("b", "y")))
    assert h.remaining(("b", "y")) == 5


def test_quota_mode_denies_only_when_every_quota_descriptor_is_over(rls: Make) -> None:
    """Two quota descriptors: one over keeps the request OK; both over deny it."""
    h = rls(SERVICE_RULES)
    h.ask(desc(("q1", "x")))
    assert h.codes(desc(("q1", "x")), desc(("q2", "x"))) == [OK, OVER, OK]
    assert h.codes(desc(("q1", "x")), desc(("q2", "x"))) == [OVER, OVER, OVER]


def test_a_regular_descriptor_over_denies_whatever_the_quota(rls: Make) -> None:
    """A quota descriptor with room does not save a request a regular rule denies."""
    assert denied_beside_a(rls(SERVICE_RULES), "q1") == 1


def test_a_lone_quota_descriptor_over_denies(rls: Make) -> None:
    """One quota descriptor, over: every quota descriptor is over, so the request is."""
    h = rls(SERVICE_RULES)
    h.ask(desc(("q1", "x")))
    assert h.codes(desc(("q1", "x"))) == [OVER, OVER]


# ---------------------------------------------------------------- replaces

REPLACES = """
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: endpoint
    value: /search
    rate_limit:
      unit: minute
      requests_per_unit: 10
      replaces:
        - name: per_user
"""


def test_replaces_drops_the_replaced_limit_for_that_request(rls: Make) -> None:
    """With /search in the request, per_user is neither checked nor consumed."""
    h = rls(REPLACES)
    h.ask(desc(("user", "u")), hits=2)
    response = h.ask(desc(("user", "u")), desc(("endpoint", "/search")))
    assert response.overall_code == OK
    assert not response.statuses[0].HasField("current_limit")
    assert response.statuses[1].limit_remaining == 9
    assert h.codes(desc(("user", "u"))) == [OVER, OVER]


def test_a_replaced_limit_is_not_consumed(rls: Make) -> None:
    """Requests through the replacing rule leave the replaced counter untouched."""
    h = rls(REPLACES)
    for _ in range(3):
        h.ask(desc(("user", "u")), desc(("endpoint", "/search")))
    assert h.remaining(("user", "u")) == 2


def test_an_overridden_replacing_descriptor_no_longer_replaces(rls: Make) -> None:
    """Envoy's limit override on /search makes a rule of its own, with no replaces (as
    upstream): per_user is then checked and consumed again; the same request asked again
    (read from the request memo) answers the same way."""
    h = rls(REPLACES)
    request = (desc(("user", "u")), desc(("endpoint", "/search"), limit=(100, MINUTE)))
    for left in (1, 0):
        response = h.ask(*request)
        assert response.overall_code == OK
        assert response.statuses[0].limit_remaining == left
        assert response.statuses[1].current_limit.requests_per_unit == 100
    assert h.codes(*request) == [OVER, OVER, OK]


# ---------------------------------------------------------------- Envoy's limit override


def test_the_request_limit_override_replaces_the_configured_limit(rls: Make) -> None:
    """descriptor.limit = 1/hour beats the config's 5/minute, on its own counter."""
    h = rls(SERVICE_RULES)
    override = desc(("b", "y"), limit=(1, HOUR))
    first = h.ask(override).statuses[0]
    assert (first.current_limit.requests_per_unit, first.current_limit.unit) == (1, HOUR)
    assert h.codes(desc(("b", "y"), limit=(1, HOUR))) == [OVER, OVER]
    assert h.remaining(("b", "y")) == 5


def test_a_limit_override_applies_without_a_matching_rule_in_a_known_domain(rls: Make) -> None:
    """An override on an unconfigured descriptor still limits; in an unknown domain it does not."""
    h = rls(SERVICE_RULES)
    assert h.codes(desc(("new", "n"), limit=(1, MINUTE))) == [OK, OK]
    assert h.codes(desc(("new", "n"), limit=(1, MINUTE))) == [OVER, OVER]
    other = h.ask(desc(("new", "n"), limit=(0, MINUTE)), domain="unknown")
    assert other.overall_code == OK


def test_a_limit_override_is_never_in_shadow_mode(rls: Make) -> None:
    """Overriding a shadow rule's limit enforces it, as envoyproxy/ratelimit does."""
    h = rls(SERVICE_RULES)
    assert h.codes(desc(("shadow", "s"), limit=(0, MINUTE))) == [OVER, OVER]


def test_a_limit_override_with_an_unknown_unit_is_ignored(rls: Make) -> None:
    """unit UNKNOWN cannot be counted: the configured limit applies instead."""
    h = rls(SERVICE_RULES)
    status = h.ask(desc(("b", "y"), limit=(1, Response.RateLimit.UNKNOWN))).statuses[0]
    assert (status.current_limit.requests_per_unit, status.limit_remaining) == (5, 4)


# ---------------------------------------------------------------- dynamic metadata

METADATA = """
domain: d
descriptors:
  - key: plan
    value: gold
    metadata: {tier: gold, weight: 3, tags: [a, b]}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: region
    metadata: {region_seen: true}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
"""


def test_dynamic_metadata_carries_the_metadata_of_passing_descriptors(rls: Make) -> None:
    """Metadata of every descriptor that passed is merged into dynamic_metadata."""
    h = rls(METADATA)
    response = h.ask(desc(("plan", "gold")), desc(("region", "eu")))
    assert json_format.MessageToDict(response.dynamic_metadata) == {
        "tier": "gold",
        "weight": 3.0,
        "tags": ["a", "b"],
        "region_seen": True,
    }
    denied = h.ask(desc(("plan", "gold")), desc(("region", "eu")))
    assert json_format.MessageToDict(denied.dynamic_metadata) == {"region_seen": True}


def test_no_metadata_leaves_dynamic_metadata_unset(rls: Make) -> None:
    """Descriptors without metadata add no dynamic_metadata at all."""
    h = rls(METADATA)
    assert not h.ask(desc(("plain", "p"))).HasField("dynamic_metadata")


# ---------------------------------------------------------------- the charging invariant

#: Two enforcing rules (2 and 5 a minute) and a shadow one (1 a minute).
_INVARIANT_KEYS = ("a", "b", "shadow")
_request = st.lists(
    st.tuples(st.sampled_from(_INVARIANT_KEYS), st.sampled_from("xy"), st.integers(0, 3)),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(requests=st.lists(_request, min_size=1, max_size=8))
def test_denied_requests_change_no_counter_and_allowed_ones_charge_exactly(
    requests: list[list[tuple[str, str, int]]],
) -> None:
    """Within one window: a denied request leaves every counter as it was; an allowed one
    takes exactly its hits from each of its counters (a shadow rule over its limit: none)."""
    service = RateLimitService(config.loads(SERVICE_RULES), MemoryStore(clock=ManualClock()))
    counters = [(key, value) for key in _INVARIANT_KEYS for value in "xy"]

    def remaining() -> dict[tuple[str, str], int]:
        probe = rls_pb2.RateLimitRequest(
            domain="d", descriptors=[desc((key, value), hits=0) for key, value in counters]
        )
        statuses = service.should_rate_limit(probe).statuses
        return {c: s.limit_remaining for c, s in zip(counters, statuses, strict=True)}

    for request in requests:
        before = remaining()
        response = service.should_rate_limit(
            rls_pb2.RateLimitRequest(
                domain="d",
                descriptors=[desc((key, value), hits=hits) for key, value, hits in request],
            )
        )
        after = remaining()
        if response.overall_code == OVER:
            assert after == before
        else:
            # Each descriptor, in order, takes its hits if they fit; only a shadow rule may
            # be over (it is counted, consumes nothing, and does not deny).
            expected = dict(before)
            for key, value, hits in request:
                if hits <= expected[(key, value)]:
                    expected[(key, value)] -= hits
                else:
                    assert key == "shadow"
            assert after == expected

"""ShouldRateLimit at the message level: statuses, matching, counters and limits."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden.errors import ConfigurationError
from ratewarden.server import config
from ratewarden.server.service import UNLIMITED_REMAINING, counter_key
from tests.server.conftest import OK, OVER, Harness, Response, desc

Make = Callable[..., Harness]
MINUTE = Response.RateLimit.MINUTE
SECOND = Response.RateLimit.SECOND

BASIC = """
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_k}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: free
    rate_limit: {unlimited: true}
  - key: open
"""


# ---------------------------------------------------------------- response shape


def test_statuses_come_back_in_request_order(rls: Make) -> None:
    """One status per descriptor, in the order the request listed them."""
    h = rls(BASIC)
    response = h.ask(desc(("free", "x")), desc(("zero", "x")), desc(("k", "a")))
    assert [s.code for s in response.statuses] == [OK, OVER, OK]
    assert response.statuses[0].limit_remaining == UNLIMITED_REMAINING
    assert response.statuses[1].current_limit.requests_per_unit == 0
    assert response.statuses[2].current_limit.requests_per_unit == 2


def test_a_descriptor_without_a_rule_is_ok_without_current_limit(rls: Make) -> None:
    """No matching rule: OK, no current_limit, nothing counted."""
    h = rls(BASIC)
    response = h.ask(desc(("nothing", "here")))
    assert response.overall_code == OK
    status = response.statuses[0]
    assert status.code == OK
    assert not status.HasField("current_limit")
    assert not status.HasField("duration_until_reset")
    assert h.store.calls == []


def test_an_unknown_domain_allows_everything(rls: Make) -> None:
    """A domain the config does not define has no rules: every descriptor is OK."""
    h = rls(BASIC)
    response = h.ask(desc(("zero", "x")), domain="elsewhere")
    assert response.overall_code == OK
    assert not response.statuses[0].HasField("current_limit")


def test_a_whitelisted_node_is_ok(rls: Make) -> None:
    """A node with neither rate_limit nor children whitelists its descriptor."""
    h = rls(BASIC)
    for _ in range(5):
        assert h.codes(desc(("open", "x"))) == [OK, OK]
    assert h.hooks.outcomes == []


def test_limit_counts_down_then_denies_with_current_limit(rls: Make) -> None:
    """2/minute: remaining 1, then 0, then OVER_LIMIT; current_limit names the rule."""
    h = rls(BASIC)
    first, second, third = (h.ask(desc(("k", "a"))) for _ in range(3))
    assert [r.overall_code for r in (first, second, third)] == [OK, OK, OVER]
    assert [r.statuses[0].limit_remaining for r in (first, second, third)] == [1, 0, 0]
    limit = third.statuses[0].current_limit
    assert (limit.requests_per_unit, limit.unit, limit.name) == (2, MINUTE, "per_k")


def test_default_algorithm_is_the_epoch_aligned_fixed_window(rls: Make) -> None:
    """Without algorithm: a fixed window aligned to the epoch, reset at the next minute."""
    h = rls(BASIC)
    h.clock.advance(45)
    h.ask(desc(("k", "a")))
    denied = [h.ask(desc(("k", "a"))) for _ in range(2)][-1]
    assert denied.overall_code == OVER
    assert denied.statuses[0].duration_until_reset.seconds == 15
    h.clock.advance(15)
    assert h.codes(desc(("k", "a"))) == [OK, OK]


def test_requests_per_unit_zero_is_always_over_without_a_store_call(rls: Make) -> None:
    """requests_per_unit: 0 denies every request, remaining 0, reset at the unit's end."""
    h = rls(BASIC)
    h.clock.advance(10)
    response = h.ask(desc(("zero", "x")))
    assert response.overall_code == OVER
    status = response.statuses[0]
    assert (status.code, status.limit_remaining) == (OVER, 0)
    assert status.duration_until_reset.seconds == 50
    assert h.store.calls == []


def test_unlimited_is_ok_with_the_maximum_remaining(rls: Make) -> None:
    """unlimited: true answers OK with limit_remaining 4294967295 and no current_limit."""
    h = rls(BASIC)
    status = h.ask(desc(("free", "x")), hits=1000).statuses[0]
    assert (status.code, status.limit_remaining) == (OK, 4294967295)
    assert not status.HasField("current_limit")
    assert h.store.calls == []


def test_an_empty_domain_or_no_descriptors_is_a_bad_request(rls: Make) -> None:
    """As envoyproxy/ratelimit does, a request without domain or descriptors is refused."""
    h = rls(BASIC)
    with pytest.raises(ConfigurationError, match="domain"):
        h.ask(desc(("k", "a")), domain="")
    with pytest.raises(ConfigurationError, match="descriptors"):
        h.ask()


def test_a_descriptor_without_entries_has_no_rule(rls: Make) -> None:
    """An empty descriptor matches nothing and is OK."""
    h = rls(BASIC)
    assert h.codes(desc()) == [OK, OK]


# ---------------------------------------------------------------- matching

MATCHING = """
domain: d
descriptors:
  - key: path
    value: /api/special
    rate_limit: {unit: minute, requests_per_unit: 1, name: exact}
  - key: path
    value: /api/*/admin
    rate_limit: {unit: minute, requests_per_unit: 2, name: admin}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 3, name: api}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 4, name: any}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 5, name: acme_user}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 6, name: tenant}
    descriptors:
      - key: user
        value: root
"""


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("/api/special", "exact"),
        ("/api/x/admin", "admin"),
        ("/api//admin", "admin"),  # '*' matches zero characters too
        ("/api/special/admin", "admin"),  # exact is only for the exact value
        ("/api/other", "api"),
        ("/api/", "api"),
        ("/web", "any"),
        ("", "any"),
    ],
)
def test_exact_then_wildcards_in_config_order_then_key_only(
    rls: Make, value: str, rule: str
) -> None:
    """Per level: exact key+value, else the first wildcard in config order, else key-only."""
    h = rls(MATCHING)
    status = h.ask(desc(("path", value))).statuses[0]
    assert status.current_limit.name == rule


def test_the_limit_applies_only_at_the_last_entry(rls: Make) -> None:
    """A parent's limit is not used for a longer request, and a child's only at full depth."""
    h = rls(MATCHING)
    nested = h.ask(desc(("tenant", "acme"), ("user", "bob"))).statuses[0]
    assert nested.current_limit.name == "acme_user"
    parent_only = h.ask(desc(("tenant", "acme"))).statuses[0]
    assert not parent_only.HasField("current_limit")  # the acme node has no limit of its own
    tenant = h.ask(desc(("tenant", "other"))).statuses[0]
    assert tenant.current_limit.name == "tenant"


def test_a_request_deeper_than_the_config_has_no_rule(rls: Make) -> None:
    """No fallback to the parent: (tenant, x), (team, y) is not limited by the tenant rule."""
    h = rls(MATCHING)
    deeper = h.ask(desc(("tenant", "other"), ("team", "y"))).statuses[0]
    assert not deeper.HasField("current_limit")
    leaf = h.ask(desc(("tenant", "other"), ("user", "root"), ("extra", "z"))).statuses[0]
    assert not leaf.HasField("current_limit")


def test_a_nested_whitelist_node_is_ok_without_limit(rls: Make) -> None:
    """(tenant, other), (user, root) reaches a node with no rule and no children."""
    h = rls(MATCHING)
    status = h.ask(desc(("tenant", "other"), ("user", "root"))).statuses[0]
    assert status.code == OK and not status.HasField("current_limit")


SHARING = """
domain: d
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: team
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /a/*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /b/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /b/exact
    rate_limit: {unit: minute, requests_per_unit: 1}
"""


def test_key_only_and_wildcard_rules_count_each_value_separately(rls: Make) -> None:
    """Each distinct value matched by a key-only or wildcard rule has its own counter."""
    h = rls(SHARING)
    assert h.codes(desc(("ip", "1.1.1.1"))) == [OK, OK]
    assert h.codes(desc(("ip", "2.2.2.2"))) == [OK, OK]
    assert h.codes(desc(("ip", "1.1.1.1"))) == [OVER, OVER]
    assert h.codes(desc(("path", "/a/1"))) == [OK, OK]
    assert h.codes(desc(("path", "/a/2"))) == [OK, OK]


def test_share_threshold_makes_matching_values_share_one_counter(rls: Make) -> None:
    """With share_threshold every value the node matches counts against one counter."""
    h = rls(SHARING)
    assert h.codes(desc(("path", "/b/1"))) == [OK, OK]
    assert h.codes(desc(("path", "/b/2"))) == [OVER, OVER]
    assert h.codes(desc(("team", "red"))) == [OK, OK]
    assert h.codes(desc(("team", "blue"))) == [OVER, OVER]


def test_share_threshold_does_not_merge_an_exact_value(rls: Make) -> None:
    """An exact node keeps its own counter beside a shared wildcard matching its value."""
    h = rls(SHARING)
    assert h.codes(desc(("path", "/b/1"))) == [OK, OK]
    assert h.codes(desc(("path", "/b/exact"))) == [OK, OK]


def test_a_shared_pattern_does_not_alias_the_same_literal_value(rls: Make) -> None:
    """A request value equal to the pattern text ('/b/*') still shares; /a/* does not."""
    h = rls(SHARING)
    assert h.codes(desc(("path", "/a/*"))) == [OK, OK]
    assert h.codes(desc(("path", "/a/x"))) == [OK, OK]


NESTED_KEYS = """
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 1}
"""


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ([("a", "x/1:b")], [("a", "x")]),
        ([("a", "x"), ("b", "y")], [("a", "x/1:b/2:=y")]),
        ([("a", "1:x")], [("a", "1")]),
        ([("a", "")], [("a", "=")]),
    ],
)
def test_values_with_separators_never_share_a_counter(
    rls: Make, first: list[tuple[str, str]], second: list[tuple[str, str]]
) -> None:
    """Counter keys are length-prefixed: a value that spells another key's layout stays apart."""
    h = rls(NESTED_KEYS)
    assert h.codes(desc(*first)) == [OK, OK]
    assert h.codes(desc(*second)) == [OK, OK]


_texts = st.text(alphabet=st.sampled_from("ab=*/:1{}%"), max_size=6)
_entries = st.lists(st.tuples(_texts, _texts), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(domain=_texts, left=_entries, right=_entries)
def test_counter_keys_are_injective(
    domain: str, left: list[tuple[str, str]], right: list[tuple[str, str]]
) -> None:
    """Two different descriptors (or domains) never produce the same counter key."""
    assert (counter_key(domain, left) == counter_key(domain, right)) == (left == right)
    assert counter_key(domain, left) != counter_key(domain + "x", left)


# ---------------------------------------------------------------- extensions


def test_gcra_with_a_burst_admits_the_burst_then_one_per_interval(rls: Make) -> None:
    """algorithm: gcra, 60/minute, burst 5: five back to back, then one per second."""
    h = rls(
        """
domain: d
descriptors:
  - key: k
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 60, burst: 5}
"""
    )
    assert [h.codes(desc(("k", "a")))[0] for _ in range(6)] == [OK] * 5 + [OVER]
    denied = h.ask(desc(("k", "a"))).statuses[0]
    assert denied.duration_until_reset.seconds == 1  # retry after one emission interval
    h.clock.advance(1)
    assert h.codes(desc(("k", "a")))[0] == OK
    assert h.codes(desc(("k", "a")))[0] == OVER


def test_sliding_window_does_not_reset_at_the_boundary(rls: Make) -> None:
    """algorithm: sliding_window: a full window just before the boundary still counts after it."""
    h = rls(
        """
domain: d
descriptors:
  - key: k
    rate_limit: {algorithm: sliding_window, unit: minute, requests_per_unit: 4}
  - key: f
    rate_limit: {unit: minute, requests_per_unit: 4}
"""
    )
    h.clock.advance(59)
    for key in ("k", "f"):
        assert [h.codes(desc((key, "a")))[0] for _ in range(4)] == [OK] * 4
    h.clock.advance(2)
    assert h.codes(desc(("f", "a")))[0] == OK  # the fixed window forgot
    assert h.codes(desc(("k", "a")))[0] == OVER  # the sliding window did not


def test_unit_multiplier_stretches_the_window(rls: Make) -> None:
    """unit_multiplier: 5 with unit minute is a 5-minute window; current_limit keeps the unit."""
    h = rls(
        """
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 1}
"""
    )
    assert h.codes(desc(("k", "a"))) == [OK, OK]
    h.clock.advance(120)
    denied = h.ask(desc(("k", "a"))).statuses[0]
    assert denied.code == OVER
    assert denied.duration_until_reset.seconds == 180
    assert (denied.current_limit.requests_per_unit, denied.current_limit.unit) == (1, MINUTE)
    h.clock.advance(180)
    assert h.codes(desc(("k", "a"))) == [OK, OK]


SEVERAL = """
domain: d
descriptors:
  - key: k
    rate_limit:
      name: layered
      limits:
        - {unit: second, requests_per_unit: 2}
        - {unit: minute, requests_per_unit: 3}
"""


def test_several_limits_on_one_descriptor_are_all_or_nothing(rls: Make) -> None:
    """2/second and 3/minute: a denial by one limit consumes nothing from the other."""
    h = rls(SEVERAL)
    assert [h.codes(desc(("k", "a")))[0] for _ in range(3)] == [OK, OK, OVER]
    h.clock.advance(1)
    assert h.codes(desc(("k", "a")))[0] == OK
    denied = h.ask(desc(("k", "a"))).statuses[0]
    assert denied.code == OVER
    # The minute limit binds: it names the limit and the wait.
    assert (denied.current_limit.requests_per_unit, denied.current_limit.unit) == (3, MINUTE)
    assert denied.duration_until_reset.seconds == 59
    h.clock.advance(59)
    assert h.codes(desc(("k", "a")))[0] == OK
    assert h.codes(desc(("k", "a")))[0] == OK


def test_several_limits_report_the_tightest_while_allowed(rls: Make) -> None:
    """While allowed, current_limit and remaining come from the limit with least room."""
    h = rls(SEVERAL)
    first = h.ask(desc(("k", "a"))).statuses[0]
    assert (first.current_limit.unit, first.limit_remaining) == (SECOND, 1)
    # The reset is the reported limit's (its second ends), not the minute's.
    until = first.duration_until_reset
    assert 0 < until.seconds * 1_000_000_000 + until.nanos <= 1_000_000_000
    h.clock.advance(1)
    h.ask(desc(("k", "a")))
    h.clock.advance(1)
    third = h.ask(desc(("k", "a"))).statuses[0]
    assert (third.current_limit.unit, third.limit_remaining) == (MINUTE, 0)


def test_swap_config_serves_the_new_rules_from_the_next_request(rls: Make) -> None:
    """swap_config replaces every rule at once; the counters of unchanged rules carry on."""
    h = rls(BASIC)
    assert h.codes(desc(("zero", "x")))[0] == OVER
    h.service.swap_config(config.loads("domain: d\ndescriptors:\n  - key: zero\n", "new.yaml"))
    assert h.service.config.domains["d"].root.keys["zero"].rule is None
    assert h.codes(desc(("zero", "x")))[0] == OK
    with pytest.raises(ConfigurationError):
        h.service.swap_config("domain: d")  # type: ignore[arg-type]

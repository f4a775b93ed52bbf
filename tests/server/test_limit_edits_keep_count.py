"""An edited limit keeps its window's count, as envoyproxy/ratelimit's does.

A window algorithm's state is named by key, algorithm and period, not by the limit
(``algorithms.state_suffix``). So a reload that lowers a rule's ``requests_per_unit``, a
second service (a rolling deploy) with the edited rules, and a request's Envoy limit
override all count the same window as the rule did: 80 hits at 100/hour, then 50/hour is
over at once, and an override of 200/hour has 120 left. Two descriptors of one request
that count the same window under different limits are one counter to the service: each
needs room for both. Over the memory store and real Redis (standalone and Cluster), both
service twins, on a ManualClock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server import config
from ratewarden.server.descriptors import joint_algorithm
from tests.server.conftest import OK, OVER, Harness, desc

Make = Callable[..., Harness]

HOUR = rls_pb2.RateLimitResponse.RateLimit.HOUR

RULES = """
domain: d
descriptors:
  - key: user
    rate_limit: {{unit: hour, requests_per_unit: {limit}, algorithm: {algorithm}}}
"""

WINDOWS = ["fixed_window", "sliding_window", "sliding_log"]


def rules(algorithm: str, limit: int) -> config.RateLimitConfig:
    return config.loads(RULES.format(limit=limit, algorithm=algorithm), "rules.yaml")


def status(h: Harness, *descriptors: object) -> tuple[int, ...]:
    """``(overall code, then each descriptor's code and limit_remaining)``."""
    response = h.ask(*descriptors)
    found: list[int] = [response.overall_code]
    for each in response.statuses:
        found += [each.code, each.limit_remaining]
    return tuple(found)


@pytest.mark.parametrize("algorithm", WINDOWS)
def test_a_reload_that_lowers_the_limit_is_over_at_once(rls: Make, algorithm: str) -> None:
    """80 hits at 100/hour, then the rules say 50/hour: over at once, nothing remaining
    (not a fresh 50); raised to 200/hour: 120 left, not 200."""
    h = rls(RULES.format(limit=100, algorithm=algorithm))
    assert status(h, desc(("user", "u"), hits=80)) == (OK, OK, 20)
    h.clock.advance(1)
    h.service.swap_config(rules(algorithm, 50))
    assert status(h, desc(("user", "u"))) == (OVER, OVER, 0)
    h.service.swap_config(rules(algorithm, 200))
    assert status(h, desc(("user", "u"), hits=0)) == (OK, OK, 120)


@pytest.mark.parametrize("algorithm", WINDOWS)
def test_a_second_service_with_edited_rules_counts_the_same_window(
    rls: Make, algorithm: str
) -> None:
    """A rolling deploy: the old service has counted 80 of 100/hour; a new one on the same
    store with 50/hour is over at once, and its hits count for the old one too."""
    old = rls(RULES.format(limit=100, algorithm=algorithm))
    assert status(old, desc(("user", "u"), hits=80)) == (OK, OK, 20)
    new = replace(old, service=type(old.service)(rules(algorithm, 50), old.store))
    assert status(new, desc(("user", "u"))) == (OVER, OVER, 0)
    assert status(old, desc(("user", "u"), hits=20)) == (OK, OK, 0)


@pytest.mark.parametrize("algorithm", WINDOWS)
def test_a_limit_override_shares_the_rules_count(rls: Make, algorithm: str) -> None:
    """Envoy's per-descriptor limit override counts the rule's window: after 80 of the
    rule's 100/hour, an override of 200/hour has 120 left and one of 50/hour is over."""
    h = rls(RULES.format(limit=100, algorithm=algorithm))
    assert status(h, desc(("user", "u"), hits=80)) == (OK, OK, 20)
    assert status(h, desc(("user", "u"), hits=0, limit=(200, HOUR))) == (OK, OK, 120)
    assert status(h, desc(("user", "u"), limit=(50, HOUR))) == (OVER, OVER, 0)
    assert status(h, desc(("user", "u"), hits=5, limit=(200, HOUR))) == (OK, OK, 115)
    assert status(h, desc(("user", "u"), hits=0)) == (OK, OK, 15)


@pytest.mark.parametrize("algorithm", WINDOWS)
def test_two_descriptors_on_one_window_need_room_for_both(rls: Make, algorithm: str) -> None:
    """One request, the same descriptor twice, once with an override of 200/hour: both
    count one window, so after 99 of the rule's 100 the rule has no room for the two hits
    (the request is over and charges nothing); after 98 it has, and both are counted."""
    h = rls(RULES.format(limit=100, algorithm=algorithm))
    assert status(h, desc(("user", "u"), hits=99)) == (OK, OK, 1)
    twice = (desc(("user", "u")), desc(("user", "u"), limit=(200, HOUR)))
    assert status(h, *twice)[:2] == (OVER, OVER)
    assert status(h, desc(("user", "u"), hits=0)) == (OK, OK, 1)

    h = rls(RULES.format(limit=100, algorithm=algorithm))
    assert status(h, desc(("user", "u"), hits=98)) == (OK, OK, 2)
    overall, first, _, second, _ = status(h, *twice)
    assert (overall, first, second) == (OK, OK, OK)
    assert status(h, desc(("user", "u"), hits=0)) == (OK, OK, 0)


def test_the_repeat_check_uses_the_stores_names() -> None:
    """Two descriptors on one key and window (limits 100 and 200) may not go in one
    ``hit_all``: the store would refuse them as one state twice. Two GCRA rates still may:
    a bucket's state is named by its whole rate."""
    from ratewarden.server.descriptors import Item

    def items(algorithm: str) -> list[Item]:
        found = []
        for limit in (100, 200):
            rule = rules(algorithm, limit).domains["d"].rules[0]
            found.append(Item((("user", "u"),), 1, None, rule, key="rls/u"))
        return found

    assert joint_algorithm(items("fixed_window")) is None
    assert joint_algorithm(items("gcra")) == "gcra"


def test_charge_denied_counters_hold_no_limit_either(rls: Make) -> None:
    """``--charge-denied`` (upstream's default counting) keeps its own fixed-window
    counters: they are named by period too, so a lowered limit is over at once (50 > 10)
    and an override of 5/hour counts the same window; before, each limit had a counter."""
    h = rls(RULES.format(limit=100, algorithm="fixed_window"), charge_denied=True)
    assert status(h, desc(("user", "alice"), hits=50)) == (OK, OK, 50)
    h.service.swap_config(rules("fixed_window", 10))
    assert status(h, desc(("user", "alice"))) == (OVER, OVER, 0)
    assert status(h, desc(("user", "alice"), hits=0, limit=(5, HOUR))) == (OVER, OVER, 0)
    h.service.swap_config(rules("fixed_window", 100))
    assert status(h, desc(("user", "alice"), hits=0)) == (OK, OK, 49)  # 51 charged


@pytest.mark.parametrize("algorithm", WINDOWS)
def test_a_check_at_a_lower_limit_holds_back_a_hit_on_its_window(rls: Make, algorithm: str) -> None:
    """One request: a hit at the rule's 50/hour and a check (``hits_addend`` 0) of the
    same window at an override of 46/hour, with 46 counted. The hit would take the count
    to 47, past the check's limit: the request is over and charges nothing, in either
    order (before, the check was never short and the count reached 47 with both OK)."""
    for order in (1, -1):
        h = rls(RULES.format(limit=50, algorithm=algorithm))
        assert status(h, desc(("user", "ivan"), hits=46)) == (OK, OK, 4)
        pair = (desc(("user", "ivan")), desc(("user", "ivan"), hits=0, limit=(46, HOUR)))
        overall, *codes = status(h, *pair[::order])
        assert overall == OVER
        assert OVER in codes[::2]
        assert status(h, desc(("user", "ivan"), hits=0)) == (OK, OK, 4)

"""``would_deny``: what shadow rules' Envoys admitted beyond their would-be shares, nothing else.

``QuotaService`` on a ``ManualClock``: a rule that is not in shadow mode (a limit of 0 here,
which answers DENY_ALL) counts nothing, and requests Envoy denied are not admissions.
"""

from __future__ import annotations

from ratewarden.server.rlqs import ALLOW_ALL, DENY_ALL, Usage, bucket_key
from tests.rlqs._quota import held, quota_service

RULES = """\
domain: edge
descriptors:
  - key: tenant
    value: closed
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: tenant
    value: watched
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 60}
"""
CLOSED = bucket_key({"tenant": "closed"})
WATCHED = bucket_key({"tenant": "watched"})


def test_a_rule_that_denies_all_counts_nothing_it_would_deny() -> None:
    """A limit of 0 without shadow mode is enforced (DENY_ALL): its denials are not shadow
    counts, however many Envoy reports."""
    quota, clock = quota_service(RULES)
    one = quota.open()
    assert held(quota.report(one, "edge", [Usage(CLOSED, 0, 10)])) == {one: DENY_ALL}
    clock.advance(1)
    quota.tick()
    quota.report(one, "edge", [Usage(CLOSED, 0, 25)])
    clock.advance(1)
    quota.tick()
    quota.report(one, "edge", [Usage(CLOSED, 3, 0)])
    assert quota.stats.would_deny == 0


def test_a_shadow_rule_counts_admitted_requests_only() -> None:
    """On a shadow rule, requests its Envoy denied (by a rule of its own) were not admitted:
    only the allowed beyond the would-be share count."""
    quota, clock = quota_service(RULES)
    one = quota.open()
    assert held(quota.report(one, "edge", [Usage(WATCHED, 0, 10)])) == {one: ALLOW_ALL}
    clock.advance(1)
    quota.tick()
    quota.report(one, "edge", [Usage(WATCHED, 0, 10)])
    assert quota.stats.would_deny == 0
    clock.advance(1)
    quota.report(one, "edge", [Usage(WATCHED, 100, 50)])
    assert quota.stats.would_deny == 100 - 1 - 1  # 1 token at once + 1 refilled in 1 s

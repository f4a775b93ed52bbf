"""QuotaService on a ManualClock: rounds, reservations, policy, reload, and the stated bound.

The bound (docs/rlqs.md#the-bound): with rounds at least ``I`` apart and a budget of changes
over ``K`` rounds (``change_rounds``), over any window of ``W`` seconds the fleet admits at
most ``r*W + M*(floor(W/(K*I)) + 2)``, where ``r`` is the rule's rate and ``M = max(burst,
Envoys)``; with ``K = 1``, ``r*W + M*(floor(W/I) + 2)``. ``SimEnvoy`` does what Envoy's filter does
with an assignment (a new or changed token bucket starts full, an unchanged one is
kept, an expired one is gone); it is a fake of Envoy for this pure logic only, the real
Envoy is in tests/e2e/test_rlqs.py.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden.server.config import loads
from ratewarden.server.rlqs import (
    ALLOW_ALL,
    DENY_ALL,
    Action,
    QuotaService,
    ReportError,
    Share,
    Usage,
    bucket_key,
)
from ratewarden.server.rlqs.quota import IDLE_S
from ratewarden.testing import ManualClock
from tests.rlqs._envoy import (
    TENANT,
    assert_fresh_within,
    assert_within_bound,
    bound_limit,
    draw_schedule,
    play,
)
from tests.rlqs._quota import held, quota_service


def rules(limit: str = "{unit: minute, requests_per_unit: 60}", **extra: str) -> str:
    lines = ["domain: edge", "descriptors:", "  - key: tenant", f"    rate_limit: {limit}"]
    lines += [f"    {key}: {value}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"


def service(text: str | None = None, **options: object) -> tuple[QuotaService, ManualClock]:
    return quota_service(text or rules(), **options)


def test_the_first_report_of_a_new_bucket_is_answered_at_once_with_the_whole_limit() -> None:
    quota, _ = service()
    one = quota.open()
    (action,) = quota.report(one, "edge", [Usage(TENANT, 1, 0)])
    assert action == Action(one, TENANT, Share(60, 1), ttl_s=3, fill_s=60)


def test_a_second_envoy_waits_for_the_next_round_then_the_shares_add_up() -> None:
    quota, clock = service()
    one, two = quota.open(), quota.open()
    quota.report(one, "edge", [Usage(TENANT, 30, 0)])
    assert quota.report(two, "edge", [Usage(TENANT, 10, 0)]) == []
    clock.advance(0.5)
    assert quota.tick() == []  # not a round yet: rounds are an interval apart
    clock.advance(0.5)
    shares = held(quota.tick())
    # 30 and 10 a second ask for 1800 and 600 a minute, over the 60: split 3 to 1
    assert shares == {one: Share(45, 1), two: Share(15, 1)}


def test_an_unchanged_share_is_sent_unchanged_every_round_so_envoy_extends_it() -> None:
    quota, clock = service()
    one = quota.open()
    first = quota.report(one, "edge", [Usage(TENANT, 5, 0)])
    for _ in range(3):
        clock.advance(1)
        quota.report(one, "edge", [Usage(TENANT, 5, 0)])
        assert quota.tick() == first


def test_a_closed_streams_share_stays_reserved_until_its_ttl_and_an_interval_are_over() -> None:
    quota, clock = service()
    one, two = quota.open(), quota.open()
    quota.report(one, "edge", [Usage(TENANT, 10, 0)])
    quota.report(two, "edge", [Usage(TENANT, 10, 0)])
    clock.advance(1)
    assert held(quota.tick()) == {one: Share(30, 1), two: Share(30, 1)}
    quota.close(two)
    clock.advance(1)
    assert held(quota.tick()) == {one: Share(30, 1)}  # two's Envoy may still use its 30
    clock.advance(3)  # two's last assignment (t=1) + ttl 3 + interval 1 = t=5
    assert held(quota.tick()) == {one: Share(60, 1)}


def test_a_reserved_share_counts_as_a_holder_so_newcomers_wait_for_room() -> None:
    """Capacity held stays within max(B, holders) with a closed stream's share reserved:
    of a burst of 3, the Envoy that left holds 2; three Envoys each needing a token of
    capacity would make 2 + 3 > max(3, 4), so only the strongest gets a share until the
    reserve is over (the bound property found this with a window rule's burst of 3)."""
    quota, clock = service(
        rules("{algorithm: token_bucket, unit: minute, requests_per_unit: 60, burst: 3}")
    )
    first, second = quota.open(), quota.open()
    quota.report(first, "edge", [Usage(TENANT, 40, 0)])
    quota.report(second, "edge", [Usage(TENANT, 20, 0)])
    clock.advance(1)
    assert held(quota.tick()) == {first: Share(40, 2), second: Share(20, 1)}
    quota.close(first)  # its 40 and 2 stay reserved until t = 1 + ttl 3 + interval 1
    streams = [second, quota.open(), quota.open()]
    rounds = []
    for _ in range(4):  # t = 2, 3, 4, 5
        for stream in streams:
            quota.report(stream, "edge", [Usage(TENANT, 5, 0)])
        clock.advance(1)
        rounds.append(held(quota.tick()))
    # 20 tokens and 1 of capacity left: the one kept gets its part of the 20 (7), the
    # parts of those who got nothing stay unused, as in the fleet's script
    waiting = {second: Share(7, 1), streams[1]: "deny_all", streams[2]: "deny_all"}
    assert rounds[:3] == [waiting] * 3
    assert rounds[3] == dict.fromkeys(streams, Share(20, 1))


def test_policy_shadow_unlimited_and_a_limit_of_zero() -> None:
    """Shadow rules and the global shadow switch allow all and count what they would have
    denied; an unlimited rule allows all; a limit of 0 denies all."""
    quota, clock = service(rules(shadow_mode="true"))
    one = quota.open()
    assert held(quota.report(one, "edge", [Usage(TENANT, 1, 0)])) == {one: ALLOW_ALL}
    clock.advance(1)
    quota.report(one, "edge", [Usage(TENANT, 100, 0)])
    assert held(quota.tick()) == {one: ALLOW_ALL}
    assert quota.stats.would_deny == 100 - 1 - 1  # 1 token at once + 1 refilled in 1 s
    quota, _ = service(shadow=True)
    assert held(quota.report(quota.open(), "edge", [Usage(TENANT, 1, 0)])) == {1: ALLOW_ALL}
    quota, _ = service(rules("{unlimited: true}"))
    assert held(quota.report(quota.open(), "edge", [Usage(TENANT, 1, 0)])) == {1: ALLOW_ALL}
    quota, _ = service(rules("{unit: second, requests_per_unit: 0}"))
    assert held(quota.report(quota.open(), "edge", [Usage(TENANT, 1, 0)])) == {1: DENY_ALL}


def test_a_bad_report_is_refused_whole_and_changes_nothing() -> None:
    quota, _ = service()
    one = quota.open()
    quota.report(one, "edge", [Usage(TENANT, 1, 0)])
    with pytest.raises(ReportError, match="differs from the stream's 'edge'"):
        quota.report(one, "other", [Usage(bucket_key({"tenant": "b"}), 1, 0)])
    with pytest.raises(ReportError, match="empty bucket_id"):
        quota.report(one, "edge", [Usage(bucket_key({"tenant": "c"}), 1, 0), Usage((), 1, 0)])
    assert quota.buckets == 1


def test_a_report_naming_a_bucket_twice_is_refused_whole() -> None:
    """Each entry within the 10^12 a report may count for a bucket, three entries of one bucket
    added up to 3 * 10^12: a bucket named twice is refused, and nothing of the report counts."""
    quota, _ = service()
    one = quota.open()
    dup = bucket_key({"tenant": "dupx"})
    with pytest.raises(ReportError, match=r"\{'tenant': 'dupx'\} is named twice in one report"):
        quota.report(one, "edge", [Usage(TENANT, 1, 0)] + [Usage(dup, 10**12, 0)] * 3)
    assert (quota.buckets, quota.stats.reports, quota.reported) == (0, 0, {})


def test_reload_abandons_buckets_whose_rule_is_gone_and_others_take_the_new_limit() -> None:
    quota, clock = service()
    one = quota.open()
    gone = bucket_key({"user": "u"})
    text = rules() + "  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
    quota.swap_config(loads(text))
    quota.report(one, "edge", [Usage(TENANT, 1, 0), Usage(gone, 1, 0)])
    actions = quota.swap_config(loads(rules("{unit: minute, requests_per_unit: 6}")))
    assert actions == [Action(one, gone, None)]
    clock.advance(1)
    assert held(quota.tick()) == {one: Share(6, 1)}


def test_a_stream_that_reports_no_request_for_idle_s_is_told_to_abandon_the_bucket() -> None:
    """The protocol's inactive bucket: IDLE_S seconds after its last reported request, the
    idle Envoy is sent an abandon and the busy one holds the whole limit."""
    quota, clock = service()
    busy, idle = quota.open(), quota.open()
    quota.report(busy, "edge", [Usage(TENANT, 1, 0)])
    quota.report(idle, "edge", [Usage(TENANT, 0, 0)])
    seen: list[Action] = []
    rounds = 0
    while Action(idle, TENANT, None) not in seen:
        assert rounds <= IDLE_S, "no abandon IDLE_S seconds after its last request"
        clock.advance(1)
        quota.report(busy, "edge", [Usage(TENANT, 100, 0)])
        quota.report(idle, "edge", [Usage(TENANT, 0, 0)])
        seen = quota.tick()
        rounds += 1
    assert rounds == IDLE_S  # it joined (asking nothing) at 0: not a second before
    assert held(seen) == {busy: Share(60, 1), idle: None}
    assert quota.stats.abandoned == 1


def test_a_rule_added_on_reload_limits_its_bucket_from_the_next_round() -> None:
    """A bucket that matched nothing (ALLOW_ALL; rules still on their way over xDS, say) gets
    its token bucket at the first round after the rule arrives."""
    quota, clock = service("domain: edge\ndescriptors:\n  - key: other\n")
    one = quota.open()
    assert held(quota.report(one, "edge", [Usage(TENANT, 1, 0)])) == {one: ALLOW_ALL}
    assert quota.swap_config(loads(rules())) == []
    clock.advance(1)
    assert held(quota.tick()) == {one: Share(60, 1)}


# ---------------------------------------------------------------- the bound, simulated


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    envoys=st.integers(1, 4),
    limit=st.integers(1, 120),
    period=st.sampled_from([1, 10, 60]),
    burst=st.one_of(st.none(), st.integers(1, 200)),
    change_rounds=st.sampled_from([1, 2, 3, 5]),
)
def test_the_fleet_never_admits_more_than_the_stated_bound_in_any_window(
    data: st.DataObject,
    envoys: int,
    limit: int,
    period: int,
    burst: int | None,
    change_rounds: int,
) -> None:
    """Random demand, report gaps, joins and leaves, a budget of changes over K = 1 to 5
    rounds: every window's admissions stay within r*W + M*(floor(W/(K*I)) + 2) (with K = 1,
    r*W + M*(floor(W/I) + 2)), the tokens handed out afresh within any K*I seconds add up to
    at most M, the shares held never sum above the limit nor their capacity above M."""
    text = rules(bound_limit(limit, period, burst))
    quota, clock = service(text, interval=1.0, ttl_s=3, change_rounds=change_rounds)
    schedule = draw_schedule(data, envoys, 48)
    played = play(schedule, [quota], clock, [0] * envoys, [""] * envoys)
    rate = Fraction(limit, period)
    # A window rule's fleet burst is one interval (1 s) of its rate; a bucket rule's, its burst.
    fleet_burst = max(1, math.ceil(rate)) if burst is None else burst
    most = max(fleet_burst, envoys)
    for shares in played.held:
        assert sum(share.tokens_per_fill for share in shares) <= limit
        assert sum(share.max_tokens for share in shares) <= most
    assert_fresh_within(played.fresh, most, change_rounds=change_rounds)
    assert_within_bound(played.admitted, rate, most, change_rounds=change_rounds)


@settings(max_examples=40, deadline=None)
@given(envoys=st.integers(2, 4), limit=st.integers(1, 200), idle_at=st.integers(2, 6))
def test_an_idle_envoys_share_goes_to_the_busy_ones_within_history_reports(
    envoys: int, limit: int, idle_at: int
) -> None:
    """Under contention, an Envoy whose last ``history`` reports count no request holds no
    token after the next round, and the busy Envoys hold the whole limit between them."""
    quota, clock = service(rules(f"{{unit: minute, requests_per_unit: {limit}}}"))
    streams = [quota.open() for _ in range(envoys)]
    latest: dict[int, object] = {}
    for second in range(idle_at + quota.history):  # history reports of idleness
        for index, stream in enumerate(streams):
            busy = index > 0 or second < idle_at
            # each busy Envoy asks for the whole limit every second: contention
            for action in quota.report(stream, "edge", [Usage(TENANT, limit if busy else 0, 0)]):
                latest[action.stream] = action.assignment
        for action in quota.tick():
            latest[action.stream] = action.assignment
        clock.advance(1)
    assert latest[streams[0]] == DENY_ALL
    shares = [latest[stream] for stream in streams[1:]]
    assert sum(s.tokens_per_fill for s in shares if isinstance(s, Share)) == limit

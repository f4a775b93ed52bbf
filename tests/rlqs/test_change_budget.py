"""The budget of changes (``--rlqs-change-rounds K``): read, refused when wrong, and honoured.

Envoy starts a changed token bucket full, so every changed share hands out its capacity
afresh. Over any ``K`` rounds (``K * I`` seconds) a bucket's changed shares hand out at
most ``max(burst, members)``; a change that does not fit keeps its member on the share it
holds, sent unchanged (``hold_back``, the arithmetic one process and the fleet's script
share). The bound over random demand is checked in test_quota.py and test_fleet.py; here,
the arithmetic, the rounds it holds back, and how soon shares follow demand.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from ratewarden.errors import ConfigurationError
from ratewarden.limiter import hold_back
from ratewarden.server.config import loads
from ratewarden.server.rlqs import DENY_ALL, QuotaCollector, QuotaService, Share, Usage
from ratewarden.server.settings import Settings, resolve
from ratewarden.testing import ManualClock
from tests.rlqs._envoy import STEP, TENANT, Schedule, assert_within_bound, play
from tests.rlqs._quota import held, quota_service

BASE = {"RATEWARDEN_CONFIG": "a.yaml", "RATEWARDEN_RLQS": "on"}


def rules(limit: str = "{algorithm: token_bucket, unit: minute, requests_per_unit: 60}") -> str:
    return f"domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {limit}\n"


def service(text: str | None = None, **options: object) -> tuple[QuotaService, ManualClock]:
    return quota_service(text or rules(), **options)


# ---------------------------------------------------------------- the setting


def test_the_default_is_one_round_every_rounds_changes_go_through_as_before() -> None:
    """K = 1 unless asked: the behaviour of earlier releases."""
    assert resolve({}, BASE).rlqs_change_rounds == 1
    quota, _ = service()
    assert quota.change_rounds == 1


def test_the_flag_wins_over_the_variable_and_both_are_read() -> None:
    """RATEWARDEN_RLQS_CHANGE_ROUNDS is read, and --rlqs-change-rounds wins over it."""
    environ = {**BASE, "RATEWARDEN_RLQS_CHANGE_ROUNDS": "4"}
    assert resolve({}, environ).rlqs_change_rounds == 4
    assert resolve({"rlqs_change_rounds": "2"}, environ).rlqs_change_rounds == 2


@pytest.mark.parametrize("value", ["0", "101", "2.5", "many"])
def test_a_bad_value_is_refused_naming_the_variable_or_the_flag(value: str) -> None:
    """0, above 100, not whole, not a number: refused at start, naming where it came from."""
    with pytest.raises(ConfigurationError, match="RATEWARDEN_RLQS_CHANGE_ROUNDS"):
        resolve({}, {**BASE, "RATEWARDEN_RLQS_CHANGE_ROUNDS": value})
    with pytest.raises(ConfigurationError, match="--rlqs-change-rounds"):
        resolve({"rlqs_change_rounds": value}, BASE)


def test_settings_and_the_service_refuse_a_budget_over_no_round() -> None:
    """Settings built in code and the library's QuotaService check it too."""
    with pytest.raises(ConfigurationError, match="--rlqs-change-rounds 0 must be a whole number"):
        Settings(config_paths=("r",), rlqs=True, rlqs_change_rounds=0)
    with pytest.raises(ValueError, match="change_rounds 0 must be a whole number >= 1"):
        service(change_rounds=0)


# ---------------------------------------------------------------- the arithmetic


def test_changes_that_fit_are_all_made_and_cost_their_new_capacity() -> None:
    """Two shares change (10 and 5 of capacity), one stays, one goes to none: 15 spent."""
    targets = [(30, 10), (20, 5), (10, 3), (0, 0)]
    holding = [(20, 4), (0, 0), (10, 3), (20, 8)]
    assert hold_back(targets, holding, 15, 60, 18, 0, 0) == (targets, 15)
    assert hold_back(targets, holding, None, 60, 18, 0, 0) == (targets, 15)


def test_a_change_that_does_not_fit_keeps_what_it_holds_and_shrinks_go_first() -> None:
    """60 tokens, burst 10: A (60, 10) is to shrink to (30, 5), newcomer B to get (30, 5).
    With room for one change, A shrinks (it makes room) and B waits with nothing; with room
    for none, both keep what they hold; the sums hold either way."""
    targets, holding = [(30, 5), (30, 5)], [(60, 10), (0, 0)]
    assert hold_back(targets, holding, 7, 60, 10, 0, 0) == ([(30, 5), (0, 0)], 5)
    assert hold_back(targets, holding, 4, 60, 10, 0, 0) == ([(60, 10), (0, 0)], 0)


def test_a_grower_waits_while_the_shrink_that_makes_its_room_does_not_fit() -> None:
    """A (50, 8) is to shrink to (20, 6), B (10, 2) to grow to (40, 4): room 5 fits B's
    change alone, but B's 40 beside A's 50 would hold 90 of 60: B keeps what it holds."""
    targets, holding = [(20, 6), (40, 4)], [(50, 8), (10, 2)]
    assert hold_back(targets, holding, 5, 60, 10, 0, 0) == ([(50, 8), (10, 2)], 0)


def test_going_to_none_is_never_held_back() -> None:
    """DENY_ALL hands out no token: with no room at all, the share that goes still goes."""
    targets, holding = [(0, 0), (60, 10)], [(30, 5), (30, 5)]
    assert hold_back(targets, holding, 0, 60, 10, 0, 0) == ([(0, 0), (30, 5)], 0)


def test_others_shares_count_against_the_room_for_the_sums() -> None:
    """Burst 5; A holds (20, 3) and is to go to (20, 2), newcomer B to get (10, 1); room
    for one token of capacity, so A's change (2) waits. Alone, B's share fits beside A's 3;
    with another holder's 2 (a closed stream's, or another replica's Envoy's), 3 + 1 + 2
    would pass max(5, 3 holders): B waits too."""
    targets, holding = [(20, 2), (10, 1)], [(20, 3), (0, 0)]
    assert hold_back(targets, holding, 1, 30, 5, 0, 0) == ([(20, 3), (10, 1)], 1)
    assert hold_back(targets, holding, 1, 30, 5, 2, 1) == ([(20, 3), (0, 0)], 0)


def test_when_what_is_held_no_longer_fits_every_change_is_made() -> None:
    """After a reload that lowered the limit the shares held do not fit it: the sums come
    first, whatever the room."""
    targets, holding = [(5, 1), (5, 1)], [(30, 5), (30, 5)]
    assert hold_back(targets, holding, 0, 10, 2, 0, 0) == (targets, 2)


pairs = st.tuples(st.integers(0, 40), st.integers(1, 12)).map(
    lambda pair: pair if pair[0] > 0 else (0, 0)
)


@settings(max_examples=300, deadline=None)
@given(
    members=st.lists(st.tuples(pairs, pairs), min_size=1, max_size=6),
    room=st.integers(-5, 40),
    slack=st.integers(0, 10),
    held_b=st.integers(0, 6),
    holders=st.integers(0, 3),
)
def test_what_is_sent_is_each_members_target_or_what_it_holds_within_room_and_sums(
    members: list[tuple[tuple[int, int], tuple[int, int]]],
    room: int,
    slack: int,
    held_b: int,
    holders: int,
) -> None:
    """Random targets and holdings, the budget just large enough for both (tokens per fill
    up to ``slack`` more; the capacity with the others' ``held_b`` exactly): each member gets
    its target or keeps what it holds (none when its target is none), the capacity of the
    changes made is what is reported spent and fits the room, and what is sent keeps the
    sums."""
    targets = [target for target, _ in members]
    holding = [was for _, was in members]
    tokens = max(sum(t for t, _ in targets), sum(t for t, _ in holding)) + slack
    burst = held_b + max(sum(b for t, b in shares if t > 0) for shares in (targets, holding))

    def fits(shares: list[tuple[int, int]]) -> bool:
        count = sum(1 for t, _ in shares if t > 0)
        capacity = held_b + sum(b for t, b in shares if t > 0)
        return sum(t for t, _ in shares) <= tokens and capacity <= max(burst, holders + count)

    sent, spent = hold_back(targets, holding, room, tokens, burst, held_b, holders)
    for target, was, got in zip(targets, holding, sent, strict=True):
        assert got == target or (got == was and target[0] > 0)
    changed = [got for got, was in zip(sent, holding, strict=True) if got != was and got[0] > 0]
    assert spent == sum(b for _, b in changed)
    assert spent <= max(room, 0)
    assert fits(sent)


# ---------------------------------------------------------------- rounds


def test_a_newcomer_waits_until_the_changes_of_the_last_k_rounds_are_over() -> None:
    """K = 3, 60 a minute, burst 10: A's first share (60, 10) spends the bucket's 10 at 0 s.
    B joins: the split (30, 5) and (30, 5) would hand out 10 more, so A keeps its share and
    B waits (DENY_ALL) at the rounds of 1 s and 2 s, and both change at 3 s. The changes held
    back are counted (``/rlqs.json``'s stats, and the metrics)."""
    quota, clock = service(
        rules("{algorithm: token_bucket, unit: minute, requests_per_unit: 60, burst: 10}"),
        change_rounds=3,
    )
    a, b = quota.open(), quota.open()
    assert held(quota.report(a, "edge", [Usage(TENANT, 60, 0)])) == {a: Share(60, 10)}
    quota.report(b, "edge", [Usage(TENANT, 60, 0)])
    rounds = []
    for _ in range(3):
        clock.advance(1)
        quota.report(a, "edge", [Usage(TENANT, 60, 0)])
        quota.report(b, "edge", [Usage(TENANT, 60, 0)])
        rounds.append(held(quota.tick()))
    waiting = {a: Share(60, 10), b: DENY_ALL}
    assert rounds == [waiting, waiting, {a: Share(30, 5), b: Share(30, 5)}]
    assert quota.stats.held_back == 4  # both changes, at 1 s and at 2 s
    registry = CollectorRegistry()
    registry.register(QuotaCollector(quota))
    assert "ratewarden_rlqs_held_back_total 4.0" in generate_latest(registry).decode()


def test_an_envoy_that_stops_asking_goes_to_deny_all_whatever_the_budget() -> None:
    """Going to DENY_ALL hands out nothing: with K = 5 the quiet Envoy's share goes at the
    same round as with K = 1 (at 2 s). The busy one's first share, as it joined (1 s), waited,
    since the quiet one's first share spent the bucket's 60 at 0 s; its share of the whole
    limit waits for that window to be over (5 s), where K = 1 gives it at 2 s."""
    got: dict[int, list[dict[int, object]]] = {}
    for change_rounds in (1, 5):
        quota, clock = service(change_rounds=change_rounds, history=1)
        quiet, busy = quota.open(), quota.open()
        quota.report(quiet, "edge", [Usage(TENANT, 60, 0)])
        quota.report(busy, "edge", [Usage(TENANT, 60, 0)])
        got[change_rounds] = []
        for second in range(1, 6):
            clock.advance(1)
            quota.report(quiet, "edge", [Usage(TENANT, 60 if second < 2 else 0, 0)])
            quota.report(busy, "edge", [Usage(TENANT, 60, 0)])
            got[change_rounds].append(held(quota.tick()))
    whole, split = Share(60, 60), Share(30, 30)
    assert got[1] == [{quiet: split, busy: split}] + [{quiet: DENY_ALL, busy: whole}] * 4
    assert got[5] == [{quiet: whole, busy: DENY_ALL}] + [{quiet: DENY_ALL, busy: DENY_ALL}] * 3 + [
        {quiet: DENY_ALL, busy: whole}
    ]


def test_a_reload_that_changes_the_budget_applies_at_the_next_round_whatever_was_spent() -> None:
    """The shares held were cut for the old budget: a reload that doubles the limit gives the
    Envoy the new one at the next round, inside a window already spent."""
    quota, clock = service(change_rounds=5)
    one = quota.open()
    assert held(quota.report(one, "edge", [Usage(TENANT, 1, 0)])) == {one: Share(60, 60)}
    quota.swap_config(
        loads(rules("{algorithm: token_bucket, unit: minute, requests_per_unit: 120}"))
    )
    clock.advance(1)
    assert held(quota.tick()) == {one: Share(120, 120)}


@settings(max_examples=60, deadline=None)
@given(
    demands=st.lists(st.integers(0, 200), min_size=1, max_size=5),
    burst=st.integers(1, 50),
    change_rounds=st.integers(2, 6),
)
def test_with_steady_demand_the_shares_are_those_of_k_1_after_k_rounds(
    demands: list[int], burst: int, change_rounds: int
) -> None:
    """Envoys join at 0 s and ask the same every second: from the round of K seconds on,
    every share is what it is with K = 1 (the split is made from the round of 1 s on, and
    a change held back is made within K rounds of it)."""
    text = rules(
        f"{{algorithm: token_bucket, unit: minute, requests_per_unit: 60, burst: {burst}}}"
    )
    latest: dict[int, dict[int, object]] = {1: {}, change_rounds: {}}
    services = {k: service(text, change_rounds=k) for k in latest}
    streams = {k: [quota.open() for _ in demands] for k, (quota, _) in services.items()}
    for second in range(change_rounds + 2):
        for k, (quota, clock) in services.items():
            if second:
                clock.advance(1)
            for stream, asked in zip(streams[k], demands, strict=True):
                latest[k] |= held(quota.report(stream, "edge", [Usage(TENANT, asked, 0)]))
            latest[k] |= held(quota.tick())
        if second >= change_rounds:
            assert latest[change_rounds] == latest[1], second


@pytest.mark.parametrize("change_rounds", [1, 4])
def test_demand_that_swaps_every_round_hands_out_one_burst_per_k_rounds(change_rounds: int) -> None:
    """Two Envoys whose demand swaps every second (reports every second, demand over one
    report): each round moves the limit from one to the other, and each move hands out a
    fresh bucket of 30. With K = 1 they admit more over 20 s than the bound for K = 4
    allows; with K = 4 they stay within it."""
    text = rules("{algorithm: token_bucket, unit: minute, requests_per_unit: 60, burst: 30}")
    quota, clock = service(text, change_rounds=change_rounds, history=1)
    steps = 80
    demand = [[40, 0] if (step // 4) % 2 == 0 else [0, 40] for step in range(steps)]
    played = play(
        Schedule(steps, [0, 0], [None, None], demand, [1.0, 1.0]), [quota], clock, [0, 0], ["", ""]
    )
    width = Fraction(steps - 1) * Fraction(STEP)
    assert_within_bound(played.admitted, Fraction(1), 30, change_rounds=change_rounds)
    tighter = width + 30 * (math.floor(width / 4) + 2)
    assert (sum(played.admitted) > tighter) == (change_rounds == 1)


def test_a_bucket_nobody_holds_keeps_its_recent_changes_for_the_next_envoy() -> None:
    """K = 5: the only Envoy got the whole limit at 0 s and was abandoned (idle) at 2 s; an
    Envoy that comes at 3 s finds the bucket's 60 spent and waits for the window, where with
    K = 1 the forgotten bucket gives it the whole limit at once."""
    got = {}
    for change_rounds in (1, 5):
        quota, clock = service(change_rounds=change_rounds, idle_s=2.0)
        first = quota.open()
        quota.report(first, "edge", [Usage(TENANT, 1, 0)])
        for _ in range(3):
            clock.advance(1)
            quota.tick()
        later = quota.open()
        answers = [held(quota.report(later, "edge", [Usage(TENANT, 1, 0)]))]
        for _ in range(3):
            clock.advance(1)
            quota.report(later, "edge", [Usage(TENANT, 1, 0)])
            answers.append(held(quota.tick()))
        got[change_rounds] = answers
    whole = Share(60, 60)
    assert got[1] == [{2: whole}, {2: whole}, {2: whole}, {2: whole}]
    assert got[5] == [{}, {2: DENY_ALL}, {2: whole}, {2: whole}]

"""The dashboard's data: the Space-Saving sketch, LiveStats' windows, and the merged view.

Pure logic on a ManualClock: no server, no sleeps.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden.server import config
from ratewarden.server.dashboard import shared
from ratewarden.server.dashboard.live import (
    LATENCY_BOUNDS,
    MAX_KEY_CHARS,
    LiveStats,
    _bucket,
    key_text,
)
from ratewarden.server.dashboard.view import TOP_SHOWN, render
from ratewarden.testing import ManualClock
from ratewarden.topk import SpaceSaving, merge

T0 = 1_700_006_400.0

streams = st.lists(st.tuples(st.sampled_from("abcdefghijklmnop"), st.integers(1, 5)), max_size=300)


@settings(max_examples=200, deadline=None)
@given(stream=streams, capacity=st.integers(1, 8))
def test_space_saving_bounds_every_true_count(stream: list[tuple[str, int]], capacity: int) -> None:
    """count - error <= true weight <= count for every tracked key, and every key heavier
    than total / capacity is tracked."""
    sketch = SpaceSaving(capacity)
    truth: Counter[str] = Counter()
    for key, weight in stream:
        sketch.add(key, weight)
        truth[key] += weight
    tracked = {heavy.key: heavy for heavy in sketch.top()}
    assert len(tracked) <= capacity
    for heavy in tracked.values():
        assert heavy.count - heavy.error <= truth[heavy.key] <= heavy.count
    total = sum(truth.values())
    for key, weight in truth.items():
        if weight > total / capacity:
            assert key in tracked


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(streams, min_size=1, max_size=4), capacity=st.integers(1, 6))
def test_merged_sketches_keep_the_bounds(parts: list[list[tuple[str, int]]], capacity: int) -> None:
    """Sketches of several workers merged: each merged count still bounds the true total."""
    truth: Counter[str] = Counter()
    summaries = []
    for stream in parts:
        sketch = SpaceSaving(capacity)
        for key, weight in stream:
            sketch.add(key, weight)
            truth[key] += weight
        summaries.append((sketch.top(), sketch.floor))
    for heavy in merge(summaries, capacity):
        assert heavy.count - heavy.error <= truth[heavy.key] <= heavy.count


def test_space_saving_refuses_a_capacity_below_one() -> None:
    """A sketch without counters could report nothing: refused."""
    with pytest.raises(ValueError, match="capacity"):
        SpaceSaving(0)


def decide(live: LiveStats, rule: str, key: str, **flags: object) -> None:
    options = {"hits": 1, "over": False, "shadowed": False, "near_hits": 0, "degraded": None}
    options.update(flags)
    live.decision(rule, (("api_key", key),), **options)  # type: ignore[arg-type]


def test_rates_cover_the_last_window_and_history_the_last_minute() -> None:
    """30 decisions now and 20 over 9 s later: rate over the 10 s window is 5/s with 2/s over;
    25 s later the window is empty but the 60 s history still holds both seconds."""
    clock = ManualClock(T0)
    live = LiveStats(clock)
    for _ in range(30):
        decide(live, "web.api_key", "a")
    clock.advance(9)
    for _ in range(20):
        decide(live, "web.api_key", "a", over=True)
    view = render([live.state()], [], clock.now())
    [row] = view["rules"]
    assert row["rate"]["decisions"] == 5.0
    assert row["rate"]["over"] == 2.0
    assert row["status"] == "over"
    assert row["loaded"] is False
    clock.advance(25)
    [row] = render([live.state()], [], clock.now())["rules"]
    assert row["rate"]["decisions"] == 0 and row["status"] == "idle"
    assert sum(row["history"]["decisions"]) == 50 and sum(row["history"]["over"]) == 20
    assert row["totals"]["decisions"] == 50 and row["totals"]["over"] == 20
    clock.advance(60)
    [row] = render([live.state()], [], clock.now())["rules"]
    assert sum(row["history"]["decisions"]) == 0
    assert row["totals"]["decisions"] == 50


def test_top_keys_rank_over_near_and_shadow_separately_and_age_out() -> None:
    """Each category has its own heavy keys; after two sketch windows without traffic they
    are gone, while totals stay."""
    clock = ManualClock(T0)
    live = LiveStats(clock, top_window_s=60)
    for _ in range(5):
        decide(live, "web.api_key", "heavy", over=True)
    decide(live, "web.api_key", "light", over=True)
    decide(live, "web.api_key", "close", near_hits=1)
    decide(live, "web.dark", "peeker", over=True, shadowed=True, hits=4)
    top = render([live.state()], [], clock.now())["top"]
    assert [(t["key"], t["hits"]) for t in top["over"]] == [
        ("api_key=heavy", 5),
        ("api_key=light", 1),
    ]
    assert [(t["rule"], t["key"]) for t in top["near"]] == [("web.api_key", "api_key=close")]
    assert [(t["rule"], t["hits"]) for t in top["shadow"]] == [("web.dark", 4)]
    clock.advance(60)
    assert render([live.state()], [], clock.now())["top"]["over"][0]["hits"] == 5
    clock.advance(60)
    assert render([live.state()], [], clock.now())["top"]["over"] == []


def test_store_latency_percentiles_are_bucket_upper_bounds() -> None:
    """98 calls of 1 ms and 2 of 80 ms: p50 within one bucket (x1.34) above 1 ms, p99 at or
    above 80 ms but never above the slowest call."""
    clock = ManualClock(T0)
    live = LiveStats(clock)
    for _ in range(98):
        live.store_call(0.001)
    live.store_call(0.08)
    live.store_call(0.08)
    live.store_call(float("nan"))  # ignored, not a crash
    latency = render([live.state()], [], clock.now())["store_latency"]
    assert latency["calls"] == 100
    assert 0.001 <= latency["p50_s"] <= 0.001 * 10 ** (1 / 8) + 1e-12
    assert latency["p99_s"] == pytest.approx(0.08)
    assert latency["max_s"] == 0.08
    assert latency["per_second"] == pytest.approx(100 / 60)  # the minute's, as the quantiles


def test_store_calls_counts_a_flush_of_times_as_store_call_counts_each() -> None:
    """The stats' flush hands its store times over at once: the same figures as one by one,
    the invalid times skipped."""
    clock = ManualClock(T0)
    times = [0.001] * 98 + [0.08, 0.08, float("nan"), -1.0, float("inf")]
    together, each = LiveStats(clock), LiveStats(clock)
    together.store_calls(times)
    together.store_calls([])
    for seconds in times:
        each.store_call(seconds)
    found = render([together.state()], [], clock.now())["store_latency"]
    assert found == render([each.state()], [], clock.now())["store_latency"]
    assert found["calls"] == 100


def test_loaded_rules_are_listed_with_their_limits_even_without_traffic() -> None:
    """Every loaded rule has a row (idle until used), in config order."""
    rules = config.loads(
        "domain: web\ndescriptors:\n"
        "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
        "  - key: b\n    shadow_mode: true\n"
        "    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: gcra, burst: 2}\n",
        "rules.yaml",
    ).rules
    view = render([LiveStats(ManualClock(T0)).state()], rules, T0)
    assert [(r["path"], r["status"], r["shadow_mode"]) for r in view["rules"]] == [
        ("web.a", "idle", False),
        ("web.b", "idle", True),
    ]
    assert view["rules"][1]["algorithm"] == "gcra"
    assert view["rules"][1]["limits"] == "5 per minute (burst 2)"
    assert view["rules"][0]["source"].startswith("rules.yaml:")


def test_limits_read_in_words_with_the_period_multiplier() -> None:
    """A limit over 5 minutes reads "1000 per 5 minutes", not "1000/5 x minute"; several limits
    are joined by commas, and a 0 limit (always over) still says its period."""
    rules = config.loads(
        "domain: web\ndescriptors:\n"
        "  - key: a\n    rate_limit:\n      limits:\n"
        "        - {unit: minute, unit_multiplier: 5, requests_per_unit: 1000}\n"
        "        - {unit: second, unit_multiplier: 7200, requests_per_unit: 9000}\n"
        "  - key: b\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
        "rules.yaml",
    ).rules
    view = render([LiveStats(ManualClock(T0)).state()], rules, T0)
    assert [r["limits"] for r in view["rules"]] == [
        "1000 per 5 minutes, 9000 per 2 hours",
        "0 per second",
    ]


def test_workers_states_merge_into_one_view(tmp_path: object) -> None:
    """Two workers' states, shared through files, add up: rates, totals, top keys, latency.
    Files that are not whole states (torn, or another version's) are skipped."""
    directory = str(tmp_path)
    clock = ManualClock(T0)
    one, two = LiveStats(clock), LiveStats(clock)
    for _ in range(3):
        decide(one, "web.api_key", "k", over=True)
    for _ in range(4):
        decide(two, "web.api_key", "k", over=True)
    one.store_call(0.002)
    two.store_call(0.002)
    state_two = two.state()
    state_two["pid"] = state_two["pid"] + 1  # as if another process wrote it
    shared.publish(directory, state_two)
    (tmp_path / "live-999.json").write_text("{not json")  # type: ignore[operator]
    (tmp_path / "live-998.json").write_text('{"seconds": []}')  # type: ignore[operator]
    states = shared.gather(directory, one.state())
    assert len(states) == 2
    view = render(states, [], clock.now())
    [row] = view["rules"]
    assert row["totals"]["over"] == 7
    assert view["top"]["over"] == [
        {"rule": "web.api_key", "key": "api_key=k", "hits": 7, "error": 0}
    ]
    assert view["store_latency"]["calls"] == 2
    assert view["workers"] == 2
    json.dumps(view, allow_nan=False)


def test_memory_stays_bounded_under_many_keys_and_rules() -> None:
    """10,000 distinct keys over 50 rules with max_rules 20: at most top_capacity keys per
    sketch, 20 rules plus "other", and long keys cut."""
    clock = ManualClock(T0)
    live = LiveStats(clock, top_capacity=16, max_rules=20)
    for i in range(10_000):
        live.decision(
            f"web.rule{i % 50}",
            (("k", str(i) * 100),),
            hits=1,
            over=True,
            shadowed=False,
            near_hits=0,
            degraded=None,
        )
    state = live.state()
    assert len(state["totals"]) == 21 and state["totals"]["other"][0] == 10_000 - 20 * 200
    for part in state["top"]["over"]:
        assert len(part["entries"]) <= 16
        assert all(len(key.partition("\x00")[2]) <= MAX_KEY_CHARS for key, _, _ in part["entries"])
    assert len(render([state], [], clock.now())["top"]["over"]) == TOP_SHOWN


def test_key_text_joins_entries_and_cuts_long_values() -> None:
    """Entries read as key=value; a key-only entry as its key; long text is cut to MAX_KEY_CHARS
    with an ellipsis and a hash of the whole, so values differing only past the cut stay apart."""
    assert key_text((("api_key", "a"), ("path", "/x"))) == "api_key=a, path=/x"
    assert key_text((("remote_address", ""),)) == "remote_address"
    long = key_text((("k", "v" * 1000),))
    assert len(long) == MAX_KEY_CHARS and long[-17] == "\u2026"
    assert key_text((("k", "v" * 1000 + "2"),)) != long


def test_each_latency_bound_falls_in_its_own_bucket() -> None:
    """A call of exactly a bound's length counts in that bound's bucket, a hair more in the next:
    percentiles are upper bounds, never below the true value."""
    for index, bound in enumerate(LATENCY_BOUNDS):
        assert _bucket(bound) == index
        assert _bucket(bound * (1 + 1e-9)) == index + 1
    assert _bucket(0.0) == 0


def test_the_sketch_moved_to_ratewarden_topk_and_the_old_import_warns() -> None:
    """``ratewarden.server.dashboard.topk.SpaceSaving`` is ``ratewarden.topk.SpaceSaving``, with
    a DeprecationWarning naming the new import."""
    import ratewarden.server.dashboard.topk as old

    with pytest.warns(DeprecationWarning, match="import SpaceSaving from ratewarden.topk"):
        assert old.SpaceSaving is SpaceSaving

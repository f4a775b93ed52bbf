"""A mapping file's ``ttl`` and summary quantiles over several workers (``stats_mapped_shared``).

Pure logic, on a ``ManualClock``: two ``MappedMetrics`` stand for two workers, and what the
multiprocess files would give the answering worker (each series' summed values, a summary's
count and sum, no quantile) is written out as metric families. The end-to-end test with
``--workers 2`` is in ``tests/server_transport/test_metrics.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, SummaryMetricFamily

from ratewarden.server.dashboard import shared
from ratewarden.server.quantiles import AgedQuantiles, merged
from ratewarden.server.stats_mapped import MappedMetrics
from ratewarden.server.stats_mapped_shared import KIND, own_state, publish, shared_view
from ratewarden.server.statsd_mapping_file import load_mapping
from ratewarden.testing import ManualClock

T0 = 1_800_000_000.0
MAPPING = """\
mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: hits
    ttl: 10s
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: over
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit_server.*.response_time"
    name: took
    observer_type: summary
    ttl: 10s
    summary_options: {quantiles: [{quantile: 0.5}, {quantile: 0.9}], max_age: 60s}
    labels: {grpc_method: "$1"}
"""
WEB = (("domain", "web"), ("key1", "api_key"))
METHOD = (("grpc_method", "ShouldRateLimit"),)


def worker(tmp_path: Path, clock: ManualClock, text: str = MAPPING) -> MappedMetrics:
    path = tmp_path / "mapper.yaml"
    path.write_text(text)
    return MappedMetrics(load_mapping(str(path)), CollectorRegistry(), clock=clock)


def state(mapped: MappedMetrics, pid: int) -> dict[str, Any]:
    """A worker's published state, through JSON as the files carry it."""
    return dict(json.loads(json.dumps(own_state(mapped))), pid=pid)


def files(hits: float, over: float, took: tuple[float, float]) -> list[Any]:
    """The families the multiprocess files give: values summed over the workers."""
    h = CounterMetricFamily("hits", "", labels=["domain", "key1"])
    h.add_metric(["web", "api_key"], hits)
    o = CounterMetricFamily("over", "", labels=["domain", "key1"])
    o.add_metric(["web", "api_key"], over)
    t = SummaryMetricFamily("took", "", labels=["grpc_method"])
    t.add_metric(["ShouldRateLimit"], count_value=took[0], sum_value=took[1])
    return [h, o, t]


def view(families: list[Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_quantiles_are_over_every_workers_window(tmp_path: Path) -> None:
    """One worker saw 1..50 ms, the other 51..100: the answer is what one window of all
    hundred gives, which neither worker's own window gives."""
    clock = ManualClock(T0)
    one, two = worker(tmp_path, clock), worker(tmp_path, clock)
    one.response_times([ms / 1000 for ms in range(1, 51)])
    clock.advance(3)
    two.response_times([ms / 1000 for ms in range(51, 101)])
    states = [state(one, 1), state(two, 2)]
    got = view(shared_view(files(0, 0, (100, 5050)), states, clock))
    alone = AgedQuantiles(clock, 60.0)
    alone.observe(range(1, 101))
    median, ninetieth = alone.quantiles([0.5, 0.9])
    assert got[("took", (*METHOD, ("quantile", "0.5")))] == median
    assert got[("took", (*METHOD, ("quantile", "0.9")))] == ninetieth
    assert 49 <= median <= 51 and 89 <= ninetieth <= 91
    own = AgedQuantiles(clock, 60.0)
    own.observe(range(1, 51))
    assert own.quantiles([0.9]) != [ninetieth]
    assert got[("took_count", METHOD)] == 100  # the files' own samples stay
    assert got[("took_sum", METHOD)] == 5050


def test_each_window_ages_on_the_readers_clock(tmp_path: Path) -> None:
    """A window published long ago answers as it would now: values older than max_age are
    gone, and with none left in any window the quantiles are NaN (no ttl here)."""
    clock = ManualClock(T0)
    text = MAPPING.replace("    ttl: 10s\n    summary_options", "    summary_options")
    assert text != MAPPING
    one, two = worker(tmp_path, clock, text), worker(tmp_path, clock, text)
    one.response_times([0.001] * 10)
    old = state(one, 1)
    clock.advance(40)
    two.response_times([0.1] * 10)
    states = [old, state(two, 2)]
    clock.advance(25)  # 65 s after one's values, 25 s after two's: one's have aged out
    got = view(shared_view(files(0, 0, (20, 1.01)), states, clock))
    assert got[("took", (*METHOD, ("quantile", "0.5")))] == pytest.approx(100, rel=0.01)
    clock.advance(60)
    got = view(shared_view(files(0, 0, (20, 1.01)), states, clock))
    assert math.isnan(got[("took", (*METHOD, ("quantile", "0.5")))])


def test_a_series_is_left_out_once_idle_for_its_ttl_in_every_worker(tmp_path: Path) -> None:
    """ttl 10 s: a series one worker updated at 0 and the other at 6 is there until 16; a
    series without a ttl stays; an expired summary loses its quantiles with its values."""
    clock = ManualClock(T0)
    one, two = worker(tmp_path, clock), worker(tmp_path, clock)
    one.count("ratelimit.service.rate_limit.web.api_key.total_hits", 3)
    one.count("ratelimit.service.rate_limit.web.api_key.over_limit", 1)
    one.response_times([0.002])
    first = state(one, 1)
    clock.advance(6)
    two.count("ratelimit.service.rate_limit.web.api_key.total_hits", 2)
    states = [first, state(two, 2)]
    clock.advance(3.9)  # 9.9 s after the first updates
    got = view(shared_view(files(5, 1, (1, 2.0)), states, clock))
    assert got[("hits_total", WEB)] == 5
    assert ("took", (*METHOD, ("quantile", "0.5"))) in got
    clock.advance(0.1)  # took: 10 s idle; hits: two's update is 4 s old
    got = view(shared_view(files(5, 1, (1, 2.0)), states, clock))
    assert got[("hits_total", WEB)] == 5
    assert not [key for key in got if key[0].startswith("took")]
    assert got[("over_total", WEB)] == 1  # no ttl
    clock.advance(6)
    got = view(shared_view(files(5, 1, (1, 2.0)), states, clock))
    assert ("hits_total", WEB) not in got
    assert got[("over_total", WEB)] == 1


def test_a_worker_keeps_telling_when_a_series_it_expired_was_updated(tmp_path: Path) -> None:
    """A worker removes a series idle for its ttl from its own view, but still publishes its
    last update, so the answering worker, which never saw it, leaves it out too."""
    clock = ManualClock(T0)
    one = worker(tmp_path, clock)
    one.count("ratelimit.service.rate_limit.web.api_key.total_hits", 3)
    clock.advance(11)
    one.collect()  # expires it here
    [entry] = state(one, 1)["updated"]
    assert entry[:2] == ["hits", [["domain", "web"], ["key1", "api_key"]]]
    assert entry[2] == T0
    got = view(shared_view(files(3, 0, (0, 0.0)), [state(one, 1)], clock))
    assert ("hits_total", WEB) not in got


def test_published_files_are_gathered_and_bad_ones_skipped(tmp_path: Path) -> None:
    """publish writes mapped-<pid>.json; gather reads the others' beside one's own and
    skips a file that is not JSON, one without the keys, and entries of another form."""
    clock = ManualClock(T0)
    one, two = worker(tmp_path, clock), worker(tmp_path, clock)
    one.response_times([0.004] * 4)
    two.response_times([0.008] * 4)
    directory = tmp_path / "shared"
    directory.mkdir()
    publish(str(directory), two)
    published = json.loads(next(directory.glob(f"{KIND}-*.json")).read_text())
    (directory / f"{KIND}-9.json").write_text("{not json")
    (directory / f"{KIND}-8.json").write_text(json.dumps({"pid": 8, "updated": []}))
    odd = {"pid": 7, "updated": [["hits", "x", 1, 1], 5], "summaries": [["took", [], [], {}]]}
    (directory / f"{KIND}-7.json").write_text(json.dumps(odd))
    own = state(one, 1)
    states = shared.gather(str(directory), own, KIND, frozenset(("pid", "updated", "summaries")))
    assert states[0] is own
    assert sorted(s["pid"] for s in states[1:]) == sorted([7, published["pid"]])
    got = view(shared_view(files(0, 0, (8, 0.048)), states, clock))
    both = merged(
        [
            AgedQuantiles.restore(clock, own["summaries"][0][3]),
            AgedQuantiles.restore(clock, published["summaries"][0][3]),
        ],
        [0.5, 0.9],
    )
    assert got[("took", (*METHOD, ("quantile", "0.5")))] == both[0]
    assert got[("took", (*METHOD, ("quantile", "0.9")))] == both[1] == pytest.approx(8, rel=0.01)


@pytest.mark.parametrize(
    "data",
    [
        None,
        {"streams": [], "head": 0, "step": 1, "rotates_at": T0},
        {"streams": [[[], [], 0]], "head": 1, "step": 1, "rotates_at": T0},
        {"streams": [[[], [], 0]], "head": 0, "step": 0, "rotates_at": T0},
        {"streams": [[[], [], 0]], "head": 0, "step": 1, "rotates_at": "soon"},
        {"streams": [[[[1, 0]], [], 0]], "head": 0, "step": 1, "rotates_at": T0},
        {"streams": [[[], [], -1]], "head": 0, "step": 1, "rotates_at": T0},
        {"streams": [[[], []]], "head": 0, "step": 1, "rotates_at": T0},
    ],
)
def test_a_window_that_is_not_one_is_refused(data: object) -> None:
    with pytest.raises(ValueError):
        AgedQuantiles.restore(ManualClock(T0), data)


def test_a_window_restored_answers_as_the_original() -> None:
    clock = ManualClock(T0)
    window = AgedQuantiles(clock, 60.0, 3)
    window.observe([-2.0, 0.0, 0.5, 3.0, 3.0, 250.0])
    clock.advance(25)
    window.observe([7.0])
    copy = AgedQuantiles.restore(clock, json.loads(json.dumps(window.state())))
    qs = [0.0, 0.25, 0.5, 0.75, 1.0]
    assert copy.quantiles(qs) == window.quantiles(qs)
    clock.advance(40)  # 65 s: the first values have aged out of both alike
    assert copy.quantiles(qs) == window.quantiles(qs) == [pytest.approx(7.0, rel=0.01)] * 5

"""observe_many: many samples into a Prometheus histogram, exactly as observe for each would.

Every histogram here is prometheus_client's own, read back through its registry; only the
fallback tests use stand-ins, objects that lack (or misshape) the private parts the fast
path reads.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

import ratewarden
from ratewarden.histograms import _parts, observe_many
from ratewarden.metrics import LATENCY_BUCKETS

ROOT = Path(__file__).resolve().parents[1]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def histogram(buckets: Sequence[float] = LATENCY_BUCKETS) -> tuple[CollectorRegistry, Histogram]:
    """A histogram ``h_seconds`` alone in a fresh registry."""
    registry = CollectorRegistry()
    return registry, Histogram("h_seconds", "d", buckets=buckets, registry=registry)


def read(registry: CollectorRegistry) -> Samples:
    """Every sample of ``registry`` but the ``_created`` timestamps."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def same_sum(bulk: float, each: float) -> bool:
    """The sums agree to a relative 1e-9 (both NaN counts as agreeing)."""
    if math.isnan(each):
        return math.isnan(bulk)
    return math.isclose(bulk, each, rel_tol=1e-9)


def assert_same(bulk: Samples, each: Samples) -> None:
    """The same series; the same bucket counts and count exactly, the sums within 1e-9."""
    assert bulk.keys() == each.keys()
    assert {k: v for k, v in bulk.items() if not k[0].endswith("_sum")} == {
        k: v for k, v in each.items() if not k[0].endswith("_sum")
    }
    for key, value in each.items():
        if key[0].endswith("_sum"):
            assert same_sum(bulk[key], value), (key, bulk[key], value)


def observed_both_ways(
    samples: Sequence[float], buckets: Sequence[float] = LATENCY_BUCKETS
) -> tuple[Samples, Samples]:
    """``samples`` through observe_many into one histogram and observe into another."""
    bulk_registry, bulk = histogram(buckets)
    each_registry, each = histogram(buckets)
    observe_many(bulk, samples)
    for sample in samples:
        each.observe(sample)
    return read(bulk_registry), read(each_registry)


bounds_lists = st.lists(
    st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=15,
    unique=True,
).map(sorted)


@st.composite
def bounds_and_samples(draw: st.DrawFn) -> tuple[list[float], list[float], list[float]]:
    """Bucket bounds; samples observed before (one by one into both); the samples of the test:
    exactly on a bound or a float either side of one, 0, subnormal and tiny, huge, and in
    between. All are durations: finite and not negative."""
    bounds = draw(bounds_lists)
    near = st.sampled_from(bounds).flatmap(
        lambda b: st.sampled_from([b, math.nextafter(b, math.inf), math.nextafter(b, 0.0)])
    )
    sample = st.one_of(
        near,
        st.just(0.0),
        st.floats(min_value=0.0, max_value=1e-300),
        st.floats(min_value=1e200, max_value=1e300),
        st.floats(min_value=0.0, max_value=10.0),
    )
    before = draw(st.lists(sample, max_size=5))
    return bounds, before, draw(st.lists(sample, max_size=200))


@settings(max_examples=300, deadline=None)
@given(bounds_and_samples())
def test_observe_many_counts_every_sample_where_observe_would(
    case: tuple[list[float], list[float], list[float]],
) -> None:
    """On top of the same earlier samples, observe_many gives the bucket counts and count that
    observe for each sample gives, and a sum within a relative 1e-9, whatever the bounds and
    wherever the samples fall: on a bound (its bucket), a float past it (the next), 0, tiny,
    huge."""
    bounds, before, samples = case
    bulk_registry, bulk = histogram(bounds)
    each_registry, each = histogram(bounds)
    for sample in before:
        bulk.observe(sample)
        each.observe(sample)
    assert _parts(bulk) is not None  # the fast path, not the fallback, is what is compared
    observe_many(bulk, samples)
    for sample in samples:
        each.observe(sample)
    assert_same(read(bulk_registry), read(each_registry))


def test_a_sample_equal_to_a_bound_is_counted_in_that_bounds_bucket() -> None:
    """As observe has it (``amount <= bound``): 0.001 is in le="0.001", the next float above
    it in le="0.01", and 1000 in le="+Inf"."""
    registry, bulk = histogram((0.001, 0.01))
    samples = [0.0, 0.001, math.nextafter(0.001, 1.0), 0.01, 1000.0]
    observe_many(bulk, samples)
    series = read(registry)
    buckets = {labels[0][1]: v for (name, labels), v in series.items() if name.endswith("bucket")}
    assert buckets == {"0.001": 2.0, "0.01": 4.0, "+Inf": 5.0}  # cumulative, as exposed
    assert series[("h_seconds_sum", ())] == pytest.approx(sum(samples))


def test_the_histograms_of_this_prometheus_client_take_the_fast_path() -> None:
    """A histogram without labels and a labelled child both have the parts observe_many reads:
    if a prometheus_client release changes them, this fails rather than every flush quietly
    going back to observe per sample."""
    _, plain = histogram()
    labelled = Histogram("l_seconds", "d", ("m",), registry=CollectorRegistry())
    assert _parts(plain) is not None
    assert _parts(labelled.labels("x")) is not None
    assert _parts(labelled) is None  # the parent has no buckets: observe refuses, below


@pytest.mark.parametrize(
    "samples",
    [
        [0.002, math.nan, 3.0],
        [math.inf, 0.5],
        [-math.inf, 0.5],
        [math.inf, -math.inf],
        [1e308, 1e308, 0.001],  # finite samples whose total is past the largest float
    ],
)
def test_nan_and_infinite_samples_are_handled_as_observe_handles_them(
    samples: list[float],
) -> None:
    """A NaN or infinite sample (or a total that overflows) sends the samples to observe one
    by one: NaN in no bucket and the sum NaN, +Inf in the last bucket, the same counts."""
    bulk, each = observed_both_ways(samples)
    assert_same(bulk, each)


def test_no_samples_change_nothing() -> None:
    """An empty flush leaves the histogram as it was."""
    bulk, each = observed_both_ways([])
    assert bulk == each
    assert bulk[("h_seconds_count", ())] == 0


def test_a_labelled_child_counts_as_observe_does_and_leaves_its_siblings_alone() -> None:
    """observe_many into one child of a labelled histogram, observe into another: their series
    match label for label, and a third child stays empty."""
    registry = CollectorRegistry()
    parent = Histogram("l_seconds", "d", ("m",), buckets=LATENCY_BUCKETS, registry=registry)
    samples = [0.0001, 0.00042, 0.003, 0.25, 7.0, 0.0001]
    observe_many(parent.labels("bulk"), samples)
    for sample in samples:
        parent.labels("each").observe(sample)
    parent.labels("idle")
    series = read(registry)

    def of(child: str) -> Samples:
        return {
            (name, tuple(kv for kv in labels if kv[0] != "m")): value
            for (name, labels), value in series.items()
            if ("m", child) in labels
        }

    assert_same(of("bulk"), of("each"))
    assert of("bulk")[("l_seconds_count", ())] == 6
    assert of("idle")[("l_seconds_count", ())] == 0


def test_the_parent_of_a_labelled_histogram_is_refused_as_observe_refuses_it() -> None:
    """Without label values there is nothing to count into: observe's ValueError."""
    parent = Histogram("l_seconds", "d", ("m",), registry=CollectorRegistry())
    with pytest.raises(ValueError, match="missing label values"):
        observe_many(parent, [0.1])


class Recorder:
    """A histogram stand-in with only ``observe``: it keeps what it is given."""

    def __init__(self) -> None:
        self.observed: list[float] = []

    def observe(self, amount: float) -> None:
        self.observed.append(amount)


class Untouchable:
    """A value the fast path must not increment."""

    def inc(self, amount: float) -> None:
        raise AssertionError(f"inc({amount}) on a histogram the fast path should not read")


def shaped(**parts: Any) -> Recorder:
    """A Recorder carrying private parts shaped as ``parts`` says."""
    recorder = Recorder()
    for name, value in parts.items():
        setattr(recorder, name, value)
    return recorder


INF = math.inf
WELL = {"_upper_bounds": [0.1, INF], "_buckets": [Untouchable(), Untouchable()]}


@pytest.mark.parametrize(
    "histogram_like",
    [
        Recorder(),
        shaped(**WELL),  # no _sum
        shaped(**WELL, _sum=object()),  # a sum without inc
        shaped(_upper_bounds=[0.1, INF], _buckets=[Untouchable()], _sum=Untouchable()),
        shaped(_upper_bounds=[0.1, 1.0], _buckets=WELL["_buckets"], _sum=Untouchable()),
        shaped(_upper_bounds=[1.0, 0.1, INF], _buckets=[Untouchable()] * 3, _sum=Untouchable()),
        shaped(_upper_bounds=["0.1", "+Inf"], _buckets=WELL["_buckets"], _sum=Untouchable()),
        shaped(_upper_bounds=(0.1, INF), _buckets=WELL["_buckets"], _sum=Untouchable()),
        shaped(_upper_bounds=[0.1, INF], _buckets=[Untouchable(), None], _sum=Untouchable()),
        shaped(_upper_bounds=[], _buckets=[], _sum=Untouchable()),
    ],
    ids=[
        "only-observe",
        "no-sum",
        "sum-without-inc",
        "fewer-buckets-than-bounds",
        "no-inf-bound",
        "unsorted-bounds",
        "string-bounds",
        "tuple-bounds",
        "bucket-without-inc",
        "no-bounds",
    ],
)
def test_a_histogram_without_the_expected_parts_gets_observe_for_each_sample(
    histogram_like: Recorder,
) -> None:
    """When the private parts are missing or shaped otherwise (a future prometheus_client),
    every sample goes to observe, in order, and nothing else is touched."""
    samples = [0.05, 0.1, 2.0, 0.05]
    observe_many(histogram_like, samples)
    assert histogram_like.observed == samples


def test_multiprocess_mode_counts_into_the_shared_files_as_observe_does(tmp_path: Path) -> None:
    """In a process started with PROMETHEUS_MULTIPROC_DIR (prometheus_client reads it on
    import), the values are mmap-backed; observe_many takes the fast path there too, and what
    MultiProcessCollector reads back from the files matches observe for each, with and
    without labels."""
    shared = tmp_path / "metrics"
    shared.mkdir()
    samples = [*LATENCY_BUCKETS, 0.0, 0.00003, 0.0004, 0.0004, 0.7, 3.5, 1e9]
    path = os.pathsep.join([str(Path(ratewarden.__file__).parents[1]), str(ROOT)])
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared), "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-m", "tests._multiprocess_histograms"],
        cwd=ROOT,
        env=env,
        input=json.dumps(samples),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(done.stdout)
    assert found["value_class"] == "MmapedValue"
    assert found["fast"] == [True, True]
    assert list(shared.glob("histogram_*.db"))
    series: dict[str, float] = found["samples"]
    bulk = {k: v for k, v in series.items() if k.startswith("bulk")}
    each = {k.replace("each", "bulk", 1): v for k, v in series.items() if k.startswith("each")}
    assert bulk.keys() == each.keys()
    assert len(bulk) == 2 * (len(LATENCY_BUCKETS) + 3)  # buckets with +Inf, count, sum
    for key, value in each.items():
        if "_sum" in key:
            assert same_sum(bulk[key], value), key
        else:
            assert bulk[key] == value, key
    assert bulk["bulk_seconds_count[]"] == len(samples)

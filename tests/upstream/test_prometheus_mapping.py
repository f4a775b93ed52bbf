"""envoyproxy/ratelimit's ``PROMETHEUS_MAPPER_YAML`` and ``PROMETHEUS_RESPONSE_TIME_AS_
MILLISECONDS``: ``--metrics-mapping`` and ``--metrics-response-time-ms``.

The mapping's matching is pure logic (``StatsdMapping.find``, statsd_exporter's rules); the
metrics come from a real service (memory store, ManualClock) through ``ServiceStats`` and
are read back from the Prometheus exposition, parsed; the last test starts ``ratewarden
serve`` on upstream's variables alone and reads the mapped names off its metrics port.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped, unused-ignore]
from prometheus_client.parser import text_string_to_metric_families

from ratewarden.errors import ConfigurationError
from ratewarden.server import upstream_env
from ratewarden.server.settings import resolve
from ratewarden.server.stats import ServiceStats
from ratewarden.server.statsd_mapping import StatsdMapping, escape_name
from ratewarden.server.statsd_mapping_file import load_mapping, parse_mapping
from ratewarden.testing import ManualClock
from tests._servers import free_port
from tests.server.conftest import ALIGNED
from tests.server_transport.test_serve_process import post_json
from tests.upstream._serve import get, serve_rules
from tests.upstream.test_statsd import RULES, decided

#: The per-key and service stats as upstream's default mapping names them, written out.
UPSTREAMS = """\
mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "ratelimit_service_rate_limit_total_hits"
    timer_type: "histogram"
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: "ratelimit_service_rate_limit_over_limit"
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.*.total_hits"
    name: "ratelimit_service_rate_limit_total_hits"
    labels: {domain: "$1", key1: "$2", key2: "$3"}
  - match: "ratelimit.service.rate_limit.*.*.within_limit"
    name: "dropped"
    action: drop
  - match: "ratelimit_server.*.total_requests"
    name: "ratelimit_service_total_requests"
    match_metric_type: counter
    labels: {grpc_method: "$1"}
  - match: "ratelimit_server.*.response_time"
    name: "ratelimit_service_response_time_seconds"
    timer_type: histogram
    scale: 0.001
    labels: {grpc_method: "$1"}
"""


def mapping_of(text: str, tmp_path: Path) -> StatsdMapping:
    path = tmp_path / "mapper.yaml"
    path.write_text(text)
    return load_mapping(str(path))


def samples(stats: ServiceStats) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The exposition's samples, by name and sorted labels."""
    body, _ = stats.exposition()
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def find(text: str, name: str, kind: str = "counter") -> tuple[str, dict[str, str]]:
    mapped = parse_mapping(yaml.safe_load(text), "m.yaml").find(name, kind)
    return mapped.name, dict(mapped.labels)


def test_globs_match_whole_fields_first_in_file_order() -> None:
    """A ``*`` stands for one whole field; a name of another length does not match; the first
    glob that matches wins; ``match_metric_type`` keeps a mapping to its kind of stat."""
    text = """\
mappings:
  - {match: "a.*.c", name: "first_$1", labels: {one: "$1", two: "${1}_v", three: "$1_v"}}
  - {match: "a.b.*", name: "second", labels: {four: "$1"}}
  - {match: "t.*", name: "timer_$1", match_metric_type: observer}
"""
    assert find(text, "a.b.c") == ("first_b", {"one": "b", "two": "b_v", "three": ""})
    assert find(text, "a.b.d") == ("second", {"four": "d"})
    assert find(text, "a.b.c.d") == ("a_b_c_d", {})  # no glob of four fields: escaped
    assert find(text, "t.x", "observer") == ("timer_x", {})
    assert find(text, "t.x", "counter") == ("t_x", {})


def test_without_ordering_the_most_literal_glob_wins() -> None:
    text = """\
defaults: {glob_disable_ordering: true}
mappings:
  - {match: "a.*.c", name: "starred"}
  - {match: "a.b.c", name: "literal"}
"""
    assert find(text, "a.b.c") == ("literal", {})
    assert find(text, "a.x.c") == ("starred", {})


def test_regexes_follow_the_globs_and_expand_as_go_does() -> None:
    """Regex mappings are tried after every glob, searched for (unanchored); ``$1``,
    ``${name}`` and ``$$`` expand as Go's ``ExpandString``, an unknown group is empty."""
    text = r"""
mappings:
  - {match: "x.*", name: "glob_$1"}
  - match: 'rate_limit\.(?P<domain>[^.]+)\.(.*)\.([a-z_]+)$'
    match_type: regex
    name: "rl_$3"
    labels: {domain: "${domain}", key: "$2", cost: "$$5", nothing: "$9"}
"""
    name = "ratelimit.service.rate_limit.web.plan_free.path.over_limit"
    assert find(text, name) == (
        "rl_over_limit",
        {"domain": "web", "key": "plan_free.path", "cost": "$5", "nothing": ""},
    )
    assert find(text, "x.y") == ("glob_y", {})


def test_names_are_escaped_for_prometheus() -> None:
    assert escape_name("ratelimit.service.a-b") == "ratelimit_service_a_b"
    assert escape_name("9lives") == "_9lives"
    assert escape_name("a--b---c") == "a_b_c"
    assert escape_name("ünï") == "_n_"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "mappings: [{match: a.b, name: x, lables: {}}]",
            r"mapping 1 has unknown fields \['lables'\]",
        ),
        ("mappings: [{match: a.b}]", "mapping 1 sets no metric name"),
        ("mappings: [{match: a.b, name: 'x-y'}]", "name 'x-y' is not a metric name"),
        ("mappings: [{match: 'a.b*', name: x}]", r"match 'a.b\*' is not a glob"),
        ("mappings: [{match: '(', name: x, match_type: regex}]", "match '\\(' is not a regex"),
        ("mappings: [{match: a, name: x, labels: {k: v}}]", "'k' is not a label name"),
        (
            "mappings: [{match: a, name: x, observer_type: histogram, summary_options: {}}]",
            "a histogram cannot take summary_options",
        ),
        ("mappings: [{match: a, name: x, buckets: [1, 0.5]}]", "buckets must rise"),
        ("mappings: [{match: a, name: x, action: keep}]", "action 'keep' is not one of map, drop"),
        ("mappings: [{match: a, name: x, ttl: soon}]", "ttl 'soon' must be a duration"),
        ("defaults: {timer_type: gauge}", "timer_type 'gauge' is not one of histogram, summary"),
        ("mappings: {match: a}", "mappings must be a list"),
    ],
)
def test_a_bad_mapping_file_is_refused_naming_the_mapping(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        parse_mapping(yaml.safe_load(text), "m.yaml")
    assert str(caught.value).startswith("m.yaml")


def test_a_missing_or_broken_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_mapping(str(tmp_path / "absent.yaml"))
    with pytest.raises(ConfigurationError, match="is not YAML"):
        mapping_of("mappings: [", tmp_path)


def test_mapped_stats_on_metrics_replace_the_built_in_names(tmp_path: Path) -> None:
    """Upstream's stats by the file's names: one family holds two label sets, a drop mapping
    drops, the timer's milliseconds scaled to seconds into a histogram, a stat no mapping
    names under its escaped StatsD name; the built-in names are gone, ratewarden's own stay."""
    stats = ServiceStats(clock=ManualClock(ALIGNED), mapping=mapping_of(UPSTREAMS, tmp_path))
    decided(stats)
    for seconds in (0.0021, 0.0149):
        stats.request(seconds)
    got = samples(stats)
    hits = "ratelimit_service_rate_limit_total_hits_total"
    assert got[(hits, (("domain", "web"), ("key1", "api_key")))] == 7
    assert got[(hits, (("domain", "web"), ("key1", "client_ip_10_1_2_3")))] == 1
    assert got[(hits, (("domain", "web"), ("key1", "plan_free"), ("key2", "path")))] == 2
    over = "ratelimit_service_rate_limit_over_limit_total"
    assert got[(over, (("domain", "web"), ("key1", "api_key")))] == 2
    names = {name for name, _ in got}
    assert "ratelimit_service_rate_limit_web_api_key_within_limit_total" not in names  # dropped
    assert "ratelimit_service_rate_limit_web_plan_free_path_within_limit_total" in names  # 3 parts
    method = (("grpc_method", "ShouldRateLimit"),)
    assert got[("ratelimit_service_total_requests_total", method)] == 2
    seconds = "ratelimit_service_response_time_seconds"
    assert got[(f"{seconds}_count", method)] == 2
    assert got[(f"{seconds}_sum", method)] == pytest.approx(0.017)
    assert got[(f"{seconds}_bucket", (*method, ("le", "0.005")))] == 1
    assert got[(f"{seconds}_bucket", (*method, ("le", "0.025")))] == 2
    assert got[("ratelimit_service_config_load_success_total", ())] == 1  # unmapped
    assert not [name for name, labels in got if dict(labels).get("key") == "api_key"]
    assert ("ratelimit_service_config_last_load_success_timestamp_seconds", ()) in got
    events = "ratewarden_metrics_mapping_events_total"
    assert got[(events, (("result", "dropped"),))] == 2  # web.api_key's and client_ip's
    assert got[(events, (("result", "unmapped"),))] > 0
    body, _ = stats.exposition()
    assert body.decode().count(f"# TYPE {hits} counter") == 1


def test_a_name_taken_by_another_kind_is_a_conflict(tmp_path: Path) -> None:
    """statsd_exporter keeps the first kind a name was made with and drops the stats that
    would make it another kind, counting them as conflicts."""
    text = """\
mappings:
  - {match: "ratelimit.service.config_load_success", name: "taken"}
  - {match: "ratelimit_server.*.response_time", name: "taken", observer_type: histogram}
"""
    stats = ServiceStats(clock=ManualClock(ALIGNED), mapping=mapping_of(text, tmp_path))
    stats.config_load(True)
    stats.request(0.002)
    got = samples(stats)
    assert got[("taken_total", ())] == 1
    assert got[("ratewarden_metrics_mapping_events_total", (("result", "conflict"),))] == 1
    assert not [name for name, _ in got if name.startswith("taken_bucket")]


def test_a_series_idle_for_its_ttl_is_removed(tmp_path: Path) -> None:
    clock = ManualClock(ALIGNED)
    text = UPSTREAMS.replace("mappings:", "defaults: {ttl: 1m}\nmappings:", 1)
    stats = ServiceStats(clock=clock, mapping=mapping_of(text, tmp_path))
    decided(stats)
    hits = (
        "ratelimit_service_rate_limit_total_hits_total",
        (("domain", "web"), ("key1", "api_key")),
    )
    assert samples(stats)[hits] == 7
    clock.advance(59)
    assert hits in samples(stats)
    clock.advance(1)
    assert hits not in samples(stats)


def test_response_time_in_milliseconds_as_upstreams_legacy() -> None:
    """--metrics-response-time-ms: the same histogram, its samples in milliseconds."""
    stats = ServiceStats(clock=ManualClock(ALIGNED), response_time_ms=True)
    stats.request(0.0021)
    got = samples(stats)
    method = (("grpc_method", "ShouldRateLimit"),)
    assert got[("ratelimit_service_response_time_seconds_sum", method)] == pytest.approx(2.1)


def test_upstreams_variables_map_and_are_ignored_where_upstream_ignores_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mapper.yaml"
    path.write_text(UPSTREAMS)
    base = {"RATEWARDEN_CONFIG": "rules.yaml"}
    on = {**base, "USE_PROMETHEUS": "true", "PROMETHEUS_MAPPER_YAML": str(path)}
    chosen = resolve({}, on)
    assert chosen.metrics_mapping is not None and len(chosen.metrics_mapping.rules) == 6
    assert upstream_env.no_effect(on) == ()
    off = {**base, "PROMETHEUS_MAPPER_YAML": str(path)}  # without USE_PROMETHEUS
    assert resolve({}, off).metrics_mapping is None
    assert upstream_env.no_effect(off) == ("PROMETHEUS_MAPPER_YAML",)
    ms = {**base, "USE_PROMETHEUS": "true", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "true"}
    assert resolve({}, ms).metrics_response_time_ms is True
    both = {**on, "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "true"}
    assert resolve({}, both).metrics_response_time_ms is False
    assert upstream_env.no_effect(both) == ("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",)
    path.write_text("mappings: [{match: a.b, name: 'x y'}]")
    with pytest.raises(ConfigurationError, match=r"^PROMETHEUS_MAPPER_YAML='.*mapper.yaml': "):
        resolve({}, on)
    with pytest.raises(ConfigurationError, match="RATEWARDEN_METRICS_MAPPING"):
        resolve({}, {**base, "RATEWARDEN_METRICS_MAPPING": str(path)})


def test_own_flags_say_which_unit_the_mapping_leaves_to_its_scale(tmp_path: Path) -> None:
    path = tmp_path / "mapper.yaml"
    path.write_text(UPSTREAMS)
    flags = {"config_paths": ("rules.yaml",), "metrics_mapping": str(path)}
    assert resolve(flags, {}).metrics_mapping is not None
    with pytest.raises(ConfigurationError, match="the mapping's scale says"):
        resolve({**flags, "metrics_response_time_ms": "true"}, {})


def test_serve_on_upstreams_variables_serves_the_mapped_names(tmp_path: Path) -> None:
    """USE_PROMETHEUS, PROMETHEUS_ADDR and PROMETHEUS_MAPPER_YAML alone: the metrics port
    shows the decisions under the file's names, counters without ``_total``."""
    mapper = tmp_path / "mapper.yaml"
    mapper.write_text(UPSTREAMS)
    metrics = free_port()
    environ = {
        "USE_PROMETHEUS": "true",
        "PROMETHEUS_ADDR": f"127.0.0.1:{metrics}",
        "PROMETHEUS_MAPPER_YAML": str(mapper),
    }
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    with serve_rules(runtime, RULES, **environ) as (http, _):
        body = {"domain": "web", "descriptors": [{"entries": [{"key": "api_key", "value": "s"}]}]}
        assert [post_json(http, body) for _ in range(6)] == [200] * 5 + [429]
        status, text = get(metrics, "/metrics")
    assert status == 200
    # USE_PROMETHEUS: the file's names as they are, as statsd_exporter's registry writes them
    assert 'ratelimit_service_rate_limit_total_hits{domain="web",key1="api_key"} 6.0' in text
    assert 'ratelimit_service_rate_limit_over_limit{domain="web",key1="api_key"} 1.0' in text
    assert (
        'ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 6.0' in text
    )
    assert "within_limit" not in text
    assert 'key="api_key"' not in text  # the built-in names are not made

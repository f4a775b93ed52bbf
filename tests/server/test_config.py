"""Loading envoyproxy/ratelimit YAML and ratewarden's extensions: valid configs and every error."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.server import config
from ratewarden.server.config import ConfigError, load, loads
from tests.server.conftest import only_problem

FIXTURES = Path(__file__).parent / "fixtures"
VALID = sorted(FIXTURES.glob("valid_*"))

# fixture file -> (line, offending key, words the message must contain)
ERRORS: dict[str, tuple[int, str, str]] = {
    "error_unknown_key.yaml": (7, "ratelimit_typo", "unknown key in a descriptor"),
    "error_unknown_key_in_rate_limit.yaml": (7, "per_unit", "unknown key in rate_limit"),
    "error_unknown_key_at_top.yaml": (2, "descriptor", "unknown key in the top level"),
    "error_misplaced_shadow_mode.yaml": (7, "shadow_mode", "belongs in the descriptor"),
    "error_duplicate_key.yaml": (7, "key", "duplicate descriptor 'test.a_x'"),
    "error_duplicate_key_nested.yaml": (6, "key", "duplicate descriptor 'test.a.b'"),
    "error_empty_domain.yaml": (1, "domain", "missing or empty"),
    "error_missing_domain.yaml": (1, "domain", "missing or empty"),
    "error_empty_key.yaml": (4, "key", "missing or empty"),
    "error_missing_key.yaml": (3, "key", "missing or empty"),
    "error_bad_unit.yaml": (5, "unit", "invalid rate limit unit 'fortnight'"),
    "error_missing_unit.yaml": (5, "unit", "is missing"),
    "error_unlimited_with_unit.yaml": (6, "unit", "must not be given with unlimited"),
    "error_unlimited_with_algorithm.yaml": (6, "algorithm", "no meaning with unlimited"),
    "error_empty_replaces.yaml": (9, "replaces", "empty entry"),
    "error_self_replaces.yaml": (10, "replaces", "cannot replace itself"),
    "error_unknown_replaces.yaml": (14, "replaces", "no rule of domain 'test' is named 'a_rul'"),
    "error_missing_requests_per_unit.yaml": (5, "requests_per_unit", "is missing"),
    "error_negative_requests_per_unit.yaml": (6, "requests_per_unit", "out of range"),
    "error_requests_per_unit_not_a_number.yaml": (6, "requests_per_unit", "whole number"),
    "error_flag_not_boolean.yaml": (4, "shadow_mode", "true or false"),
    "error_bad_algorithm.yaml": (5, "algorithm", "unknown algorithm 'moving_window'"),
    "error_bad_failure_mode.yaml": (5, "failure_mode", "unknown failure_mode 'maybe'"),
    "error_burst_with_fixed_window.yaml": (7, "burst", "fixed_window"),
    "error_zero_burst.yaml": (8, "burst", "out of range"),
    "error_zero_unit_multiplier.yaml": (6, "unit_multiplier", "out of range"),
    "error_limits_beside_unit.yaml": (5, "unit", "inside each item of limits"),
    "error_empty_limits.yaml": (6, "limits", "is empty"),
    "error_limits_same_period.yaml": (6, "limits", "same period"),
    "error_bad_limits_item.yaml": (7, "name", "'name' belongs in rate_limit"),
    "error_invalid_yaml.yaml": (5, "yaml", "not valid YAML"),
    "error_empty_file.yaml": (1, "domain", "the file is empty"),
    "error_top_level_list.yaml": (1, "the top level", "must be a mapping"),
    "error_descriptors_not_a_list.yaml": (3, "descriptors", "must be a list"),
    "error_duplicate_mapping_key.yaml": (4, "key", "appears twice"),
    "error_metadata_not_a_mapping.yaml": (4, "metadata", "must be a mapping"),
    "error_metadata_not_utf8.yaml": (5, "metadata", "base64 of UTF-8 text"),
    "error_rate_limit_empty.yaml": (4, "rate_limit", "must be a mapping"),
    "error_two_documents.yaml": (2, "yaml", "another document"),
    "error_unknown_tag.yaml": (4, "value", "cannot be read"),
    "error_share_threshold_on_exact_value.yaml": (5, "share_threshold", "exact value"),
    "error_same_stats_key.yaml": (6, "key", "spells the same stats key"),
}


def test_every_error_fixture_is_in_the_table() -> None:
    """Each fixtures/error_*.yaml has an expectation (the multi-file ones are tested apart)."""
    files = {path.name for path in FIXTURES.glob("error_*.yaml")}
    apart = {"error_duplicate_domain.yaml", "error_several_problems.yaml"}
    assert files - apart == set(ERRORS)


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_config_error_names_file_line_and_key(name: str) -> None:
    """Each broken config fails with one problem naming its file, line and key."""
    line, key, words = ERRORS[name]
    path = FIXTURES / name
    with pytest.raises(ConfigError) as caught:
        load([path])
    error = caught.value
    assert [(p.file, p.line, p.key) for p in error.errors] == [(str(path), line, key)]
    assert words in error.errors[0].message
    assert str(error) == f"{path}:{line}: {key}: {error.errors[0].message}"


def test_duplicate_domains_across_files_name_both_places() -> None:
    """The second file defining a domain fails, pointing at the first definition."""
    first, second = FIXTURES / "valid_messaging.yaml", FIXTURES / "error_duplicate_domain.yaml"
    problem = only_problem([first, second])
    assert (problem.file, problem.line, problem.key) == (str(second), 2, "domain")
    assert "duplicate domain 'messaging'" in problem.message
    assert f"{first}:2" in problem.message


def test_a_file_given_twice_is_said_to_be_given_twice() -> None:
    """`--config messaging.yaml messaging.yaml`: the one problem says the file was given
    twice, not that its domain is defined twice (in itself)."""
    path = FIXTURES / "valid_messaging.yaml"
    for merge_domains in (False, True):
        with pytest.raises(ConfigError) as caught:
            load([path, path], merge_domains=merge_domains)
        [problem] = caught.value.errors
        assert (problem.file, problem.line, problem.key) == (str(path), 0, "file")
        assert problem.message.startswith("given twice:")
        assert "duplicate domain" not in problem.message


def test_a_file_reached_twice_names_both_spellings(tmp_path: Path) -> None:
    """A file named once by itself and once through its directory (or a symlink) is the
    same file once resolved: the problem names the first spelling and the resolved path."""
    shutil.copy(FIXTURES / "valid_messaging.yaml", tmp_path / "messaging.yaml")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "messaging.yaml")
    with pytest.raises(ConfigError) as caught:
        load([tmp_path / "messaging.yaml", tmp_path])
    assert [(p.file, p.key) for p in caught.value.errors] == [
        (str(tmp_path / "link.yaml"), "file"),
        (str(tmp_path / "messaging.yaml"), "file"),
    ]
    link, again = caught.value.errors
    assert f"given twice as {str(tmp_path / 'messaging.yaml')!r}" in link.message
    assert str((tmp_path / "messaging.yaml").resolve()) in link.message
    assert again.message.startswith("given twice:")


def test_replaces_may_name_a_rule_of_another_file_of_a_merged_domain(tmp_path: Path) -> None:
    """With merge_domains the names a replaces entry may give are those of the whole
    domain, every file of it; without merging, each file's domain stands alone."""
    (tmp_path / "a.yaml").write_text(
        "domain: d\ndescriptors:\n  - key: a\n"
        "    rate_limit: {unit: second, requests_per_unit: 1, name: first}\n"
    )
    (tmp_path / "b.yaml").write_text(
        "domain: d\ndescriptors:\n  - key: b\n"
        "    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: first}]}\n"
    )
    merged = load([tmp_path], merge_domains=True).domains["d"]
    assert [rule.replaces for rule in merged.rules] == [(), ("first",)]
    (tmp_path / "a.yaml").rename(tmp_path / "a.yaml.off")
    problem = only_problem([tmp_path])
    assert (problem.file, problem.line, problem.key) == (str(tmp_path / "b.yaml"), 4, "replaces")
    assert "no rule of domain 'd' is named 'first' (rule names: none)" in problem.message


def test_every_problem_of_a_file_is_listed_in_line_order() -> None:
    """ConfigError.errors holds all problems found, not just the first."""
    path = FIXTURES / "error_several_problems.yaml"
    with pytest.raises(ConfigError) as caught:
        load([path])
    assert [(p.line, p.key) for p in caught.value.errors] == [
        (4, "unit"),
        (6, "colour"),
        (8, "unit"),
    ]
    assert str(caught.value).startswith("3 problems in the rate limit config:\n")


def test_problems_of_several_files_are_all_reported() -> None:
    """Errors in two files come back together, file by file, each file in line order."""
    paths = [FIXTURES / "error_bad_unit.yaml", FIXTURES / "error_empty_key.yaml"]
    with pytest.raises(ConfigError) as caught:
        load(paths)
    # Both files also define the domain "test": the second is a duplicate.
    assert [(Path(p.file).name, p.line, p.key) for p in caught.value.errors] == [
        ("error_bad_unit.yaml", 5, "unit"),
        ("error_empty_key.yaml", 1, "domain"),
        ("error_empty_key.yaml", 4, "key"),
    ]


def test_config_error_is_a_configuration_error() -> None:
    """Callers catching ratewarden's ConfigurationError (and ValueError) catch config errors."""
    with pytest.raises(ConfigurationError):
        loads("domain: ''")
    assert issubclass(ConfigError, ValueError)


def test_missing_paths_are_errors_and_empty_directories_are_not(tmp_path: Path) -> None:
    """A path that does not exist is reported; a directory without YAML adds no rule (as
    upstream loads an empty runtime directory; the server warns: test_empty_runtime_directory);
    no path at all is an error."""
    (tmp_path / "notes.txt").write_text("not a config")
    with pytest.raises(ConfigError) as caught:
        load([tmp_path / "absent.yaml", tmp_path])
    assert [p.key for p in caught.value.errors] == ["path"]
    assert dict(load([tmp_path]).domains) == {}
    with pytest.raises(ConfigError):
        load([])


# ---------------------------------------------------------------- valid configs


def test_upstream_and_extension_fixtures_load() -> None:
    """The README examples of envoyproxy/ratelimit and every extension load together."""
    loaded = load(VALID)
    assert sorted(loaded.domains) == ["edge_proxy_per_ip", "extensions", "messaging"]
    assert loaded.files == tuple(str(path) for path in VALID)


def test_a_directory_loads_its_yaml_files_in_name_order(tmp_path: Path) -> None:
    """*.yaml and *.yml of a directory, sorted; hidden files and other suffixes are skipped."""
    for path in VALID:
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / ".hidden.yaml").write_text("not: [valid")
    (tmp_path / "README.md").write_text("# not a config")
    loaded = load([tmp_path])
    assert [Path(name).name for name in loaded.files] == [path.name for path in VALID]
    assert list(loaded.domains) == ["edge_proxy_per_ip", "extensions", "messaging"]
    assert load(str(tmp_path)).domains.keys() == loaded.domains.keys()


def test_upstream_keys_keep_their_meaning() -> None:
    """Units any case, numeric values kept as written, unlimited, names, replaces, flags."""
    domain = load([FIXTURES / "valid_edge_proxy.yml"]).domains["edge_proxy_per_ip"]
    by_path = {rule.path: rule for rule in domain.rules}
    exact = by_path["edge_proxy_per_ip.remote_address_50.0.0.5"]
    assert exact.limits[0].unit == "second" and exact.algorithm == "fixed_window"
    assert by_path["edge_proxy_per_ip.bay_area_*"].always_over
    assert by_path["edge_proxy_per_ip.phone_007"].limits[0].unit == "month"
    unlimited = by_path["edge_proxy_per_ip.destination_cluster_mock"]
    assert (unlimited.unlimited, unlimited.limits, unlimited.name) == (True, (), "unlimited_mock")
    bad = by_path["edge_proxy_per_ip.source_cluster_proxy.destination_cluster_bad_service"]
    assert (bad.shadow_mode, bad.detailed_metric, bad.name) == (True, True, "bad")
    good = by_path["edge_proxy_per_ip.source_cluster_proxy.destination_cluster_good_service"]
    assert good.replaces == ("bad",)
    path_rule = by_path["edge_proxy_per_ip.path_/api/v*/users"]
    assert path_rule.quota_mode and path_rule.limits[0].unit == "week"
    node = domain.root.wildcards["path"][0]
    assert (node.share_threshold, node.value_to_metric) == (True, True)


def test_extensions_build_rates_for_the_store() -> None:
    """algorithm, burst, unit_multiplier, failure_mode, limits and metadata become Rules."""
    domain = load([FIXTURES / "valid_extensions.yaml"]).domains["extensions"]
    api_key, tenant, bucket, _leaky, _log = domain.rules
    assert (api_key.algorithm, api_key.failure_mode) == ("gcra", "local")
    assert api_key.rates == (Rate.parse("10/second", burst=20), Rate.parse("1000/hour"))
    assert tenant.rates == (Rate.parse("100/5m"),)
    assert (tenant.algorithm, tenant.failure_mode) == ("sliding_window", "closed")
    assert bucket.rates[0].burst == 50
    node = domain.root.keys["api_key"]
    assert node.metadata_dict() == {"plan": "gold", "weights": [1, 2.5]}


def test_matching_prefers_exact_then_wildcard_then_key() -> None:
    """DomainConfig.match walks the tree as envoyproxy/ratelimit does."""
    domain = load([FIXTURES / "valid_edge_proxy.yml"]).domains["edge_proxy_per_ip"]

    def rule_of(*entries: tuple[str, str]) -> str | None:
        found = domain.match(entries)
        return None if found is None or found.rule is None else found.rule.path

    assert rule_of(("remote_address", "50.0.0.5")) == "edge_proxy_per_ip.remote_address_50.0.0.5"
    assert rule_of(("remote_address", "1.2.3.4")) == "edge_proxy_per_ip.remote_address"
    assert rule_of(("bay_area", "")) == "edge_proxy_per_ip.bay_area_*"
    assert rule_of(("path", "/api/v2/users")) == "edge_proxy_per_ip.path_/api/v*/users"
    assert rule_of(("path", "/api/v2/groups")) is None
    assert rule_of(("source_cluster", "proxy")) is None
    assert rule_of(("remote_address", "1.2.3.4"), ("x", "y")) is None
    assert domain.match(()) is None


def test_unlimited_accepts_a_leftover_requests_per_unit() -> None:
    """As in envoyproxy/ratelimit, requests_per_unit beside unlimited is ignored."""
    loaded = loads(
        "domain: d\ndescriptors:\n  - key: a\n"
        "    rate_limit: {unlimited: true, requests_per_unit: 5}\n"
    )
    (rule,) = loaded.rules
    assert rule.unlimited and rule.limits == ()


def test_yaml_merge_keys_are_supported() -> None:
    """Anchors and << merges, which yaml.v2 resolves, work here too."""
    text = """
domain: d
defaults: &defaults
  unit: minute
"""
    with pytest.raises(ConfigError):
        loads(text)  # 'defaults' is not a key; anchors must live inside valid keys
    text = """
domain: d
descriptors:
  - key: a
    rate_limit: &per_minute {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit:
      <<: *per_minute
      requests_per_unit: 7
"""
    first, second = loads(text).rules
    assert (first.limits[0].requests_per_unit, second.limits[0].requests_per_unit) == (5, 7)
    assert second.limits[0].unit == "minute"


def test_a_domain_without_descriptors_loads_with_no_rules() -> None:
    """domain alone is valid: every request in it is allowed."""
    loaded = loads("domain: quiet\n")
    assert loaded.domains["quiet"].rules == ()
    assert loaded.match("quiet", [("a", "b")]) is None


def test_the_config_is_frozen() -> None:
    """Rules and the config cannot be changed in place; a reload builds a new config."""
    loaded = load(VALID)
    rule = loaded.rules[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        loaded.domains["x"] = loaded.domains["messaging"]  # type: ignore[index]


def test_to_dict_round_trips_through_yaml(tmp_path: Path) -> None:
    """Each domain of to_dict() is itself a config file that loads to the same rules."""
    loaded = load(VALID)
    for index, domain in enumerate(loaded.to_dict()["domains"]):
        (tmp_path / f"{index}.yaml").write_text(yaml.safe_dump(domain, sort_keys=False))
    again = load([tmp_path])
    assert again.to_dict() == loaded.to_dict()
    assert [r.path for r in again.rules] == [r.path for r in loaded.rules]


def test_describe_lists_every_rule_with_its_source() -> None:
    """describe() shows one line per rule: key path, limits, flags, file:line."""
    path = FIXTURES / "valid_extensions.yaml"
    text = load([path]).describe()
    lines = text.splitlines()
    assert len(lines) == 5
    assert lines[0] == (
        "extensions.api_key: 10/second (burst 20), 1000/hour algorithm=gcra "
        f"failure_mode=local [name=per_key]  ({path}:7)"
    )
    assert "5/minute" in lines[4]
    edge = load([FIXTURES / "valid_edge_proxy.yml"]).describe()
    assert "unlimited [name=unlimited_mock]" in edge
    assert "[shadow_mode detailed_metric name=bad]" in edge
    assert config.RateLimitConfig({}).describe() == ""


def test_describe_spells_a_period_multiplier_as_rate_does() -> None:
    """A limit over 5 minutes is described "1000/5m", as str(Rate) spells it and Rate.parse
    reads it back, not "1000/5 x minute"."""
    loaded = config.loads(
        "domain: web\ndescriptors:\n  - key: a\n    rate_limit:\n"
        "      {unit: minute, unit_multiplier: 5, requests_per_unit: 1000, burst: 20,\n"
        "       algorithm: gcra}\n",
        "rules.yaml",
    )
    assert loaded.describe().startswith("web.a: 1000/5m (burst 20) algorithm=gcra")
    assert str(loaded.rules[0].limits[0]) == str(loaded.rules[0].rates[0])

"""Our versions of the invalid files of envoyproxy/ratelimit's config tests: each is refused.

Upstream panics with ``file: what``; ratewarden raises one ``ConfigError`` listing
every problem as ``file:line: key: what is wrong and what to do`` and loads nothing.
Each of upstream's invalid files has its own version in ``tests/upstream/cases/``
(``invalid_*.yaml``); the ones that need a second file are tested apart.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ratewarden.server.config import ConfigError, load
from tests.server.conftest import only_problem

CASES = Path(__file__).parent / "cases"

#: our file -> (upstream's test, line, key, words of the message) of the problem it is about.
INVALID: dict[str, tuple[str, int, str, str]] = {
    "invalid_empty_domain.yaml": ("TestEmptyDomain", 1, "domain", "is missing or empty"),
    "invalid_empty_key.yaml": ("TestEmptyKey", 3, "key", "is missing or empty"),
    "invalid_duplicate_key.yaml": (
        "TestDuplicateKey",
        6,
        "key",
        "duplicate descriptor 'storefront.tenant_acme'",
    ),
    "invalid_same_stats_key.yaml": (
        "TestDuplicateKey (a key_value spelled twice)",
        6,
        "key",
        "spells the same stats key",
    ),
    "invalid_bad_unit.yaml": ("TestBadLimitUnit", 6, "unit", "invalid rate limit unit 'fortnight'"),
    "invalid_replaces_self.yaml": ("TestReplacesSelf", 10, "replaces", "cannot replace itself"),
    "invalid_replaces_empty.yaml": ("TestReplacesEmpty", 10, "replaces", "empty entry"),
    "invalid_bad_yaml.yaml": ("TestBadYaml", 2, "yaml", "unexpected end of stream"),
    "invalid_misspelled_rate_limit.yaml": (
        "TestMisspelledKey",
        5,
        "ratelimit",
        "unknown key in a descriptor",
    ),
    "invalid_misspelled_requests_per_unit.yaml": (
        "TestMisspelledKey",
        7,
        "requestsperunit",
        "unknown key in rate_limit",
    ),
    "invalid_non_string_key.yaml": ("TestNonStringKey", 1, "1.5", "keys must be strings"),
    "invalid_non_map_list.yaml": ("TestNonMapList", 3, "a descriptor", "must be a mapping"),
    "invalid_unlimited_with_unit.yaml": (
        "TestUnlimitedWithRateLimitUnit",
        6,
        "unit",
        "must not be given with unlimited",
    ),
    "invalid_share_threshold_on_exact_value.yaml": (
        "loadDescriptors' share_threshold check",
        5,
        "share_threshold",
        "exact value 'q1'",
    ),
}


def test_every_invalid_case_file_is_in_the_table() -> None:
    """No invalid_*.yaml is left untested (the duplicate domain one needs basic.yaml)."""
    files = {path.name for path in CASES.glob("invalid_*.yaml")}
    assert files - {"invalid_duplicate_domain.yaml"} == set(INVALID)


@pytest.mark.parametrize("name", sorted(INVALID))
def test_upstreams_invalid_files_are_refused_with_file_line_and_reason(name: str) -> None:
    """The file does not load; its problem is named with file, line and key, and every
    other problem found on the way has a file and line too."""
    _, line, key, words = INVALID[name]
    path = CASES / name
    with pytest.raises(ConfigError) as caught:
        load([path])
    problems = caught.value.errors
    assert all(p.file == str(path) and p.line >= 1 for p in problems), problems
    found = [p for p in problems if (p.line, p.key) == (line, key)]
    assert found and words in found[0].message, problems
    assert f"{path}:{line}: {key}: " in str(caught.value)


def test_a_second_file_of_a_domain_is_a_duplicate_domain() -> None:
    """TestDuplicateDomain: basic.yaml then a file of the same domain."""
    second = CASES / "invalid_duplicate_domain.yaml"
    problem = only_problem([CASES / "basic.yaml", second])
    assert (problem.file, problem.line, problem.key) == (str(second), 2, "domain")
    assert "duplicate domain 'storefront'" in problem.message
    assert f"{CASES / 'basic.yaml'}:2" in problem.message


def test_merging_a_file_with_itself_is_a_duplicate_descriptor(tmp_path: Path) -> None:
    """TestDuplicateKeyDomainMerge: with merging on, one descriptor twice is still refused
    (a copy of the file: the same path twice is said to be given twice, and read once)."""
    path = CASES / "merge_first.yaml"
    copy = tmp_path / "merge_copy.yaml"
    copy.write_bytes(path.read_bytes())
    problem = only_problem([path, copy], merge_domains=True)
    assert (problem.file, problem.line, problem.key) == (str(copy), 4, "key")
    assert "duplicate descriptor 'storefront.tenant_acme' in the merged domain" in problem.message
    again = only_problem([path, path], merge_domains=True)
    assert (again.file, again.key) == (str(path), "file")
    assert again.message.startswith("given twice")


def test_merged_files_whose_descriptors_spell_one_stats_key_are_refused() -> None:
    """key tenant_acme in one file, key tenant value acme in the other: one composite key."""
    second = CASES / "merge_same_stats_key.yaml"
    problem = only_problem([CASES / "merge_first.yaml", second], merge_domains=True)
    assert (problem.file, problem.line, problem.key) == (str(second), 4, "key")
    assert "the same stats key as 'storefront.tenant_acme'" in problem.message

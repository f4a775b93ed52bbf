"""The upstream runtime layout: rules under RUNTIME_ROOT, merged domains, symlink swaps reloaded."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from ratewarden.server import config as rules
from ratewarden.server.reload import ConfigWatcher, ReloadOutcome
from ratewarden.server.settings import resolve

PART_ONE = """\
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 5}
"""
PART_TWO = """\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: path
    value: "/search*"
    rate_limit: {unit: second, requests_per_unit: 2}
"""


def write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def test_merge_domain_config_merges_one_domain_spread_over_files(tmp_path: Path) -> None:
    """MERGE_DOMAIN_CONFIG=true: two files of domain edge are one domain with both files' rules."""
    write(tmp_path, {"a.yaml": PART_ONE, "b.yaml": PART_TWO})
    chosen = resolve({"config_paths": [str(tmp_path)]}, {"MERGE_DOMAIN_CONFIG": "true"})
    loaded = rules.load(chosen.config_paths, merge_domains=chosen.merge_domains)
    assert list(loaded.domains) == ["edge"]
    assert [rule.path for rule in loaded.rules] == [
        "edge.api_key",
        "edge.remote_address",
        "edge.path_/search*",
    ]
    assert loaded.match("edge", [("api_key", "k1")]) is not None
    assert loaded.match("edge", [("remote_address", "10.0.0.1")]) is not None
    found = loaded.match("edge", [("path", "/search/x")])
    assert found is not None and found.rule is not None
    assert found.rule.path == "edge.path_/search*"


def test_without_merge_a_domain_in_two_files_stays_an_error(tmp_path: Path) -> None:
    """Without MERGE_DOMAIN_CONFIG a second file of the same domain is refused, as before."""
    write(tmp_path, {"a.yaml": PART_ONE, "b.yaml": PART_TWO})
    with pytest.raises(rules.ConfigError, match="duplicate domain 'edge'"):
        rules.load([tmp_path])


def test_merged_files_may_not_define_one_descriptor_twice(tmp_path: Path) -> None:
    """Merging joins descriptors; one both files define is an error naming both places."""
    write(tmp_path, {"a.yaml": PART_ONE, "b.yaml": PART_ONE})
    with pytest.raises(rules.ConfigError) as caught:
        rules.load([tmp_path], merge_domains=True)
    message = str(caught.value)
    assert "b.yaml:3" in message and "duplicate descriptor 'edge.api_key'" in message
    assert "a.yaml:3" in message


def test_a_symlink_swap_of_the_runtime_root_is_picked_up_by_reload(tmp_path: Path) -> None:
    """RUNTIME_ROOT is a link swapped to a new version (upstream's deploy): the next check
    reloads from the new version's ROOT/SUBDIRECTORY/config."""
    write(tmp_path / "v1" / "ratelimit" / "config", {"edge.yaml": PART_ONE})
    write(tmp_path / "v2" / "ratelimit" / "config", {"a.yaml": PART_ONE, "b.yaml": PART_TWO})
    current = tmp_path / "current"
    current.symlink_to(tmp_path / "v1")
    environ = {
        "RUNTIME_ROOT": str(current),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "MERGE_DOMAIN_CONFIG": "true",
    }
    chosen = resolve({}, environ)
    assert chosen.config_paths == (str(current / "ratelimit" / "config"),)
    applied: list[rules.RateLimitConfig] = []
    watcher = ConfigWatcher(
        chosen.config_paths,
        functools.partial(rules.load, merge_domains=chosen.merge_domains),
        applied.append,
    )
    first = watcher.load_initial()
    assert len(first.rules) == 1
    assert watcher.check_once() is ReloadOutcome.UNCHANGED

    swap = tmp_path / "current.new"
    swap.symlink_to(tmp_path / "v2")
    os.replace(swap, current)  # one rename, as a deploy swaps the link

    assert watcher.check_once() is ReloadOutcome.RELOADED
    assert [len(config.rules) for config in applied] == [3]
    assert watcher.check_once() is ReloadOutcome.UNCHANGED

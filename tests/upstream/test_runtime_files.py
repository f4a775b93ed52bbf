"""Which files of upstream's runtime directory are rules: every file there, subdirectories
too, as goruntime reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, and each
file of a Kubernetes ConfigMap once (its hidden ``..data`` and ``..<timestamp>`` never)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.server import config as rules
from ratewarden.server.reload import ConfigWatcher, ReloadOutcome
from ratewarden.server.rules_source import file_loader
from ratewarden.server.settings import resolve


def domain(name: str, limit: int = 5) -> str:
    return (
        f"domain: {name}\ndescriptors:\n  - key: k\n"
        f"    rate_limit: {{unit: minute, requests_per_unit: {limit}}}\n"
    )


def upstream_env(root: Path) -> dict[str, str]:
    return {"RUNTIME_ROOT": str(root), "RUNTIME_SUBDIRECTORY": "ratelimit"}


def test_every_file_of_the_runtime_directory_is_read_as_upstream_reads_it(tmp_path: Path) -> None:
    """A file without a suffix and one in a subdirectory are rules, as for goruntime; before,
    only other.yaml was read and mongo's and sub's limits were silently not enforced."""
    config = tmp_path / "ratelimit" / "config"
    (config / "sub").mkdir(parents=True)
    (config / "mongo").write_text(domain("mongo_cps"))
    (config / "sub" / "example.yaml").write_text(domain("rl"))
    (config / "other.yaml").write_text(domain("other"))
    settings = resolve({}, upstream_env(tmp_path))
    assert settings.config_files == "all"
    loaded = file_loader(settings)(settings.config_paths)
    assert sorted(loaded.domains) == ["mongo_cps", "other", "rl"]
    names = [Path(name).relative_to(config).as_posix() for name in loaded.files]
    assert names == ["mongo", "other.yaml", "sub/example.yaml"]  # depth first, by name


def test_a_configmap_mount_is_read_once_through_its_visible_links(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The kubelet's layout: files in a hidden ..<timestamp> directory, ..data linking to it,
    and a visible link per key through ..data. Each key loads once (no duplicate domain from
    the hidden copy), nothing is said about the machinery, and a swap of ..data reloads."""
    mount = tmp_path / "ratelimit" / "config"
    first, second = mount / "..2026_07_01_00_00_00.1", mount / "..2026_07_01_00_05_00.2"
    for version, limit in ((first, 5), (second, 6)):
        version.mkdir(parents=True)
        (version / "edge.yaml").write_text(domain("edge", limit))
        (version / "mongo").write_text(domain("mongo_cps", limit))
    (mount / "..data").symlink_to(first.name)
    for key in ("edge.yaml", "mongo"):
        (mount / key).symlink_to(f"..data/{key}")
    settings = resolve({}, upstream_env(tmp_path))
    applied: list[rules.RateLimitConfig] = []
    watcher = ConfigWatcher(
        settings.config_paths, file_loader(settings), applied.append, files=settings.config_files
    )
    with caplog.at_level(logging.WARNING, logger="ratewarden.server.reload"):
        loaded = watcher.load_initial()
        assert sorted(loaded.domains) == ["edge", "mongo_cps"]
        assert [Path(name).name for name in loaded.files] == ["edge.yaml", "mongo"]
        (mount / "..data_tmp").symlink_to(second.name)
        os.replace(mount / "..data_tmp", mount / "..data")
        assert watcher.check_once() is ReloadOutcome.RELOADED
    assert [rule.limits[0].requests_per_unit for rule in applied[0].rules] == [6, 6]
    assert caplog.records == [] and watcher.skipped == ()


def test_ratewardens_own_config_flag_keeps_its_own_file_rule(tmp_path: Path) -> None:
    """--config wins over RUNTIME_ROOT, and with it ratewarden's own default (yaml) unless
    --config-files says otherwise."""
    environ = {**upstream_env(tmp_path), "RATEWARDEN_CONFIG": str(tmp_path)}
    assert resolve({}, environ).config_files == "yaml"
    assert resolve({"config_files": "all"}, environ).config_files == "all"


def test_config_files_all_with_rules_from_xds_is_refused() -> None:
    """--config-files says which files of a directory are rules: meaningless with xDS."""
    with pytest.raises(ConfigurationError, match=r"--config-files all .* xDS server"):
        resolve({"config_xds": "xds.internal:18000", "config_files": "all"}, {})
    with pytest.raises(ConfigurationError, match="must be one of: yaml, all"):
        resolve({"config_paths": ["r.yaml"]}, {"RATEWARDEN_CONFIG_FILES": "every"})

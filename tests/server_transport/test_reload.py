"""Hot reload: a changed config is loaded and applied; a bad one never replaces the good one."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from ratewarden.server import config
from ratewarden.server.reload import ConfigWatcher, ReloadOutcome
from tests.server_transport.conftest import OK, OVER_LIMIT, StartServer, channel, http, request

RULES = """\
domain: reload
descriptors:
  - key: api_key
    rate_limit: {{unit: minute, requests_per_unit: {limit}}}
"""


def write(path: Path, limit: int | str) -> None:
    """Write a one-rule config, moving mtime forward so the change is seen on any filesystem."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(RULES.format(limit=limit))
    os.utime(path, ns=(before + 10**9, before + 10**9))


def limit_of(loaded: config.RateLimitConfig) -> int:
    return loaded.rules[0].limits[0].requests_per_unit


class Applied(list[config.RateLimitConfig]):
    """Records every config the watcher applies, in order."""

    def __call__(self, loaded: config.RateLimitConfig) -> None:
        self.append(loaded)


def watcher_for(paths: Sequence[Path]) -> tuple[ConfigWatcher[config.RateLimitConfig], Applied]:
    applied = Applied()
    watcher = ConfigWatcher([str(p) for p in paths], config.load, applied)
    return watcher, applied


def test_nothing_changed_means_nothing_reloaded(tmp_path: Path) -> None:
    """Polling unchanged files neither loads nor applies anything."""
    rules = tmp_path / "rules.yaml"
    write(rules, 5)
    watcher, applied = watcher_for([rules])
    assert limit_of(watcher.load_initial()) == 5
    assert [watcher.check_once() for _ in range(3)] == [ReloadOutcome.UNCHANGED] * 3
    assert applied == [] and watcher.reloads == 0


def test_an_edited_file_is_loaded_and_applied(tmp_path: Path) -> None:
    """After an edit, one poll loads the new rules and hands them to apply."""
    rules = tmp_path / "rules.yaml"
    write(rules, 5)
    watcher, applied = watcher_for([rules])
    watcher.load_initial()
    write(rules, 7)
    assert watcher.check_once() is ReloadOutcome.RELOADED
    assert [limit_of(c) for c in applied] == [7]
    assert watcher.check_once() is ReloadOutcome.UNCHANGED
    assert watcher.reloads == 1


def test_a_bad_edit_keeps_the_last_good_config_and_logs_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A config that fails to load is not applied; the log line carries file:line: key: reason."""
    rules = tmp_path / "rules.yaml"
    write(rules, 5)
    watcher, applied = watcher_for([rules])
    watcher.load_initial()
    write(rules, "lots")
    with caplog.at_level(logging.ERROR, logger="ratewarden.server.reload"):
        assert watcher.check_once() is ReloadOutcome.FAILED
    assert applied == []
    assert watcher.failures == 1
    [record] = caplog.records
    assert record.event == "config_reload_failed"  # type: ignore[attr-defined]
    assert record.errors == [  # type: ignore[attr-defined]
        f"{rules}:4: requests_per_unit: must be a whole number, not 'lots'"
    ]
    assert "requests_per_unit" in (watcher.last_error or "")
    # Not retried until the file changes again; the fix then applies.
    assert watcher.check_once() is ReloadOutcome.UNCHANGED
    write(rules, 9)
    assert watcher.check_once() is ReloadOutcome.RELOADED
    assert [limit_of(c) for c in applied] == [9]
    assert watcher.last_error is None


def test_a_kubernetes_configmap_swap_is_seen(tmp_path: Path) -> None:
    """The ..data symlink swapped to a new directory (same mtime and size) triggers a reload."""
    mount = tmp_path / "mount"
    mount.mkdir()
    first, second = mount / "..2024_01_01_00_00_00.1", mount / "..2024_01_01_00_01_00.2"
    first.mkdir()
    second.mkdir()
    (first / "rules.yaml").write_text(RULES.format(limit=5))
    (second / "rules.yaml").write_text(RULES.format(limit=6))
    stamp = (first / "rules.yaml").stat().st_mtime_ns
    os.utime(second / "rules.yaml", ns=(stamp, stamp))
    (mount / "..data").symlink_to(first.name)
    (mount / "rules.yaml").symlink_to("..data/rules.yaml")
    watcher, applied = watcher_for([mount])
    assert limit_of(watcher.load_initial()) == 5
    assert watcher.check_once() is ReloadOutcome.UNCHANGED
    # What the kubelet does: a new link, renamed over ..data in one step.
    (mount / "..data_tmp").symlink_to(second.name)
    os.replace(mount / "..data_tmp", mount / "..data")
    assert watcher.check_once() is ReloadOutcome.RELOADED
    assert [limit_of(c) for c in applied] == [6]


def test_a_file_added_to_a_watched_directory_is_loaded(tmp_path: Path) -> None:
    """A new *.yaml in a config directory is part of the next load."""
    write(tmp_path / "a.yaml", 5)
    watcher, applied = watcher_for([tmp_path])
    assert len(watcher.load_initial().domains) == 1
    (tmp_path / "b.yaml").write_text("domain: other\ndescriptors:\n  - key: ip\n")
    assert watcher.check_once() is ReloadOutcome.RELOADED
    assert sorted(applied[0].domains) == ["other", "reload"]


def test_files_the_loader_does_not_read_trigger_no_reload(tmp_path: Path) -> None:
    """Only the directory's top-level *.yaml and *.yml are rules: a README, a hidden
    file, a subdirectory (a *.yaml inside it included) come and go without a reload,
    which would empty the over-limit cache for nothing."""
    write(tmp_path / "a.yaml", 5)
    watcher, applied = watcher_for([tmp_path])
    watcher.load_initial()
    (tmp_path / "README.md").write_text("how these rules work\n")
    (tmp_path / ".a.yaml.swp").write_text("an editor's swap file\n")
    (tmp_path / "a.yaml.bak").write_text(RULES.format(limit=1))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "b.yaml").write_text(RULES.format(limit=2))
    assert watcher.check_once() is ReloadOutcome.UNCHANGED
    (tmp_path / "README.md").write_text("how these rules work, edited\n")
    (tmp_path / "old" / "b.yaml").unlink()
    assert watcher.check_once() is ReloadOutcome.UNCHANGED
    assert applied == [] and watcher.reloads == 0
    write(tmp_path / "a.yaml", 6)
    assert watcher.check_once() is ReloadOutcome.RELOADED
    assert [limit_of(c) for c in applied] == [6]


def test_a_yaml_link_that_starts_to_resolve_is_loaded(tmp_path: Path) -> None:
    """A *.yaml link to nothing is skipped by the loader; once its target appears it is
    a rule file, and the next poll loads it."""
    write(tmp_path / "a.yaml", 5)
    (tmp_path / "b.yaml").symlink_to(tmp_path / "later" / "b.yaml")
    watcher, applied = watcher_for([tmp_path])
    assert list(watcher.load_initial().domains) == ["reload"]
    (tmp_path / "later").mkdir()
    (tmp_path / "later" / "b.yaml").write_text("domain: other\ndescriptors:\n  - key: ip\n")
    assert watcher.check_once() is ReloadOutcome.RELOADED
    assert sorted(applied[0].domains) == ["other", "reload"]


def test_a_deleted_file_fails_the_reload_and_keeps_the_rules(tmp_path: Path) -> None:
    """Removing the only config file is a failed reload, not an empty rule set."""
    rules = tmp_path / "rules.yaml"
    write(rules, 5)
    watcher, applied = watcher_for([rules])
    watcher.load_initial()
    rules.unlink()
    assert watcher.check_once() is ReloadOutcome.FAILED
    assert applied == []
    assert "does not exist" in (watcher.last_error or "")


def test_a_file_written_while_it_is_read_is_read_again(tmp_path: Path) -> None:
    """If the files change during a load, it is dropped and the next poll reads them again."""
    rules = tmp_path / "rules.yaml"
    write(rules, 5)
    loads: list[int] = []

    def load_while_editing(paths: Sequence[str]) -> config.RateLimitConfig:
        loaded = config.load(paths)
        loads.append(limit_of(loaded))
        if len(loads) == 2:  # the first reload: an editor saves again meanwhile
            write(rules, 8)
        return loaded

    applied = Applied()
    watcher = ConfigWatcher([str(rules)], load_while_editing, applied)
    watcher.load_initial()
    write(rules, 7)
    assert watcher.check_once() is ReloadOutcome.UNCHANGED
    assert applied == []
    assert watcher.check_once() is ReloadOutcome.RELOADED
    assert loads == [5, 7, 8]
    assert [limit_of(c) for c in applied] == [8]


TWO_KEYS = """\
domain: transport
descriptors:
  - key: a
    rate_limit: {{name: {version}, unit: minute, requests_per_unit: {limit}}}
  - key: b
    rate_limit: {{name: {version}, unit: minute, requests_per_unit: {limit}}}
"""


async def test_a_reload_changes_what_the_running_server_enforces(
    start_server: StartServer,
) -> None:
    """After an edit and one poll, gRPC calls and /rlconfig follow the new rules."""
    server = await start_server(TWO_KEYS.format(version="v1", limit=1))
    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        calls = [await stub.ShouldRateLimit(request("transport", {"a": "x"})) for _ in range(2)]
        assert [c.overall_code for c in calls] == [OK, OVER_LIMIT]
        path = Path(server.settings.config_paths[0])
        path.write_text(TWO_KEYS.format(version="v2", limit=5))
        os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)
        assert server.watcher.check_once() is ReloadOutcome.RELOADED
        after = await stub.ShouldRateLimit(request("transport", {"a": "y"}))
    assert after.statuses[0].current_limit.name == "v2"
    assert after.statuses[0].current_limit.requests_per_unit == 5
    assert "5/minute" in (await http(server.http_port, "GET", "/rlconfig")).body.decode()


async def test_each_config_swap_calls_config_applied(start_server: StartServer) -> None:
    """``ratewarden serve`` refreezes the heap there (server/heap.py); a failed reload
    swaps nothing and calls nothing."""
    server = await start_server(TWO_KEYS.format(version="v1", limit=1))
    swaps: list[str] = []
    server.config_applied = lambda: swaps.append(server.config.rules[0].name)
    path = Path(server.settings.config_paths[0])
    path.write_text(TWO_KEYS.format(version="v2", limit=5))
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)
    assert server.watcher.check_once() is ReloadOutcome.RELOADED
    path.write_text("domain: [not a domain")
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)
    assert server.watcher.check_once() is not ReloadOutcome.RELOADED
    assert swaps == ["v2"]


async def test_a_reload_under_traffic_loses_no_call_and_never_mixes_configs(
    start_server: StartServer,
) -> None:
    """Calls racing 20 reloads all succeed, and each answers wholly from one config version."""
    server = await start_server(TWO_KEYS.format(version="v0", limit=1000))
    path = Path(server.settings.config_paths[0])
    stop = asyncio.Event()

    async def reload_repeatedly() -> int:
        for version in range(1, 21):
            path.write_text(TWO_KEYS.format(version=f"v{version}", limit=1000 + version))
            os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)
            assert await server.watcher.acheck_once() is ReloadOutcome.RELOADED
            await asyncio.sleep(0.005)  # let calls through between reloads
        stop.set()
        return server.watcher.reloads

    async def call_until_stopped(stub: Any) -> list[Any]:
        replies = []
        while not stop.is_set():
            replies.append(await stub.ShouldRateLimit(request("transport", {"a": "1"}, {"b": "2"})))
        return replies

    async with channel(server.grpc_port) as chan:
        stub = rls_pb2_grpc.RateLimitServiceStub(chan)
        reloads, *batches = await asyncio.gather(
            reload_repeatedly(), *(call_until_stopped(stub) for _ in range(4))
        )
    replies = [reply for batch in batches for reply in batch]
    assert reloads == 20
    assert len(replies) > 20
    for reply in replies:
        assert reply.overall_code == OK
        first, second = (s.current_limit for s in reply.statuses)
        assert first.name == second.name
        assert first.requests_per_unit == second.requests_per_unit == 1000 + int(first.name[1:])

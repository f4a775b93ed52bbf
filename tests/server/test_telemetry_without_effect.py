"""Telemetry flags that change nothing (StatsD's with StatsD and DogStatsD off, tracing's with
``--tracing off``) are named in one warning when serve assembles its telemetry, as
envoyproxy/ratelimit's variables are in ``upstream_settings_without_effect``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from ratewarden.server.app import RateLimitServer
from ratewarden.server.settings import resolve
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.testing import ManualClock

RULES = """\
domain: web
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 5}
"""


async def _warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, flags: dict[str, Any]
) -> list[logging.LogRecord]:
    """The ``options_without_effect`` records of a server built (not started) on ``flags``,
    read as ``ratewarden serve`` reads its flags."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    settings = resolve({"config_paths": [str(rules)], **flags}, {})
    with caplog.at_level(logging.WARNING, logger="ratewarden.server"):
        server = RateLimitServer(settings, store=AsyncMemoryStore(clock=ManualClock()))
        await server.close()
    return [r for r in caplog.records if getattr(r, "event", "") == "options_without_effect"]


async def test_each_option_without_effect_is_named_in_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """--statsd-tags, --statsd-interval, --tracing-sampling-rate and --tracing-resource with
    StatsD and tracing off: one warning naming the four, and what each needs."""
    flags = {
        "statsd_tags": "env:prod",
        "statsd_interval": "1",
        "tracing_sampling_rate": "0.5",
        "tracing_resource": "service.name=edge",
    }
    (record,) = await _warnings(tmp_path, caplog, flags)
    assert record.options == [  # type: ignore[attr-defined]
        "--statsd-tags",
        "--statsd-interval",
        "--tracing-sampling-rate",
        "--tracing-resource",
    ]
    assert "--statsd-tags needs --statsd or --dogstatsd" in record.getMessage()
    assert "--tracing-resource needs --tracing" in record.getMessage()


async def test_only_the_options_of_what_is_off_are_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """StatsD on and tracing off: --tracing-resource is named, --statsd-tags (in use) is not."""
    flags = {"tracing": "off", "statsd": "udp://127.0.0.1:9", "tracing_resource": "a=b"}
    (record,) = await _warnings(tmp_path, caplog, {**flags, "statsd_tags": "env:prod"})
    assert record.options == ["--tracing-resource"]  # type: ignore[attr-defined]


async def test_options_in_use_and_defaults_give_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing given, or each option with what it needs: no warning."""
    assert await _warnings(tmp_path, caplog, {}) == []
    flags = {"dogstatsd": "udp://127.0.0.1:9", "statsd_tags": "env:prod", "statsd_interval": "1"}
    assert await _warnings(tmp_path, caplog, flags) == []

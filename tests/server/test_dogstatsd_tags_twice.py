"""``DD_ENV`` and ``--statsd-tags env:...`` both given: every DogStatsD line carries both, in
datadog-go's order (its environment tags, then the client's), as datadog-go and Datadog's
Python client send them (neither drops one); serve warns once at start, naming the tag.
Lines are read off a UDP socket on loopback."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest

from ratewarden.server.dogstatsd import statsd_sinks
from ratewarden.server.settings import resolve
from tests._servers import HOST


def _sink_and_lines(
    caplog: pytest.LogCaptureFixture, flags: dict[str, Any], environ: dict[str, str]
) -> tuple[list[str], list[logging.LogRecord]]:
    """The lines one counter sends over the sinks ``flags`` and ``environ`` give, and the
    ``dogstatsd_tags_twice`` records."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind((HOST, 0))
        listener.settimeout(5)
        address = f"udp://{HOST}:{listener.getsockname()[1]}"
        settings = resolve({"config_paths": ["rules.yaml"], "dogstatsd": address, **flags}, {})
        with caplog.at_level(logging.WARNING, logger="ratewarden.server"):
            (sink,) = statsd_sinks(settings, environ)
        sink.count("ratelimit.service.config_load_success")
        asyncio.run(sink.send())
        lines = listener.recv(65536).decode().splitlines()
    records = [r for r in caplog.records if getattr(r, "event", "") == "dogstatsd_tags_twice"]
    return lines, records


def test_env_given_both_ways_is_sent_twice_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """DD_ENV=staging, --statsd-tags env:prod,zone:a: ``#env:staging,env:prod,zone:a``, and
    one warning naming env (not zone, given once)."""
    flags = {"statsd_tags": "env:prod,zone:a"}
    lines, records = _sink_and_lines(caplog, flags, {"DD_ENV": "staging", "DD_SERVICE": "rl"})
    assert lines == [
        "ratelimit.service.config_load_success:1|c|#env:staging,service:rl,env:prod,zone:a"
    ]
    (record,) = records
    assert record.tags == ["env"]  # type: ignore[attr-defined]
    assert "env:staging" in record.getMessage()


def test_each_tag_given_once_is_not_warned(caplog: pytest.LogCaptureFixture) -> None:
    """DD_ENV alone beside --statsd-tags zone:a: no warning."""
    lines, records = _sink_and_lines(caplog, {"statsd_tags": "zone:a"}, {"DD_ENV": "staging"})
    assert lines == ["ratelimit.service.config_load_success:1|c|#env:staging,zone:a"]
    assert records == []

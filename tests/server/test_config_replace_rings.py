"""Rules that replace one another in a ring are loaded, and said: a request matching them all
is held to none of them (every name a matched rule replaces is dropped, as upstream does).
``config check`` prints the warning; a chain (A replaces B replaces C) is no ring."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ratewarden.cli import main
from ratewarden.server import config

RING = """\
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, name: x, replaces: [{name: y}]}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5, name: y, replaces: [{name: x}]}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 5, name: z}
"""
CHAIN = """\
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, name: x, replaces: [{name: y}]}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5, name: y, replaces: [{name: z}]}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 5, name: z}
"""


def rings(caplog: pytest.LogCaptureFixture) -> list[list[str]]:
    return [
        list(getattr(r, "rules", []))
        for r in caplog.records
        if getattr(r, "event", "") == "config_replaces_cycle"
    ]


def test_two_rules_replacing_each_other_load_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="ratewarden.server"):
        loaded = config.loads(RING, "r.yaml")
    assert loaded is not None
    assert rings(caplog) == [["x", "y"]]


def test_a_chain_is_no_ring(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ratewarden.server"):
        config.loads(CHAIN, "c.yaml")
    assert rings(caplog) == []


def test_config_check_prints_the_ring(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RING)
    assert main(["config", "check", str(rules)]) == 0
    out = capsys.readouterr()
    assert "rules of domain 'd' replace one another (x, y)" in out.out + out.err

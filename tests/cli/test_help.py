"""What ``--help`` says: serve's placeholders are the docs tables', ``--quota-mode`` in the
docs' words, and ``config`` has a description."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ratewarden.cli import METAVARS, _parser
from ratewarden.server.options import OPTIONS
from ratewarden.server.parsers import boolean

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: A flag and its placeholder as a table row of the docs writes it: | `--grpc-port N` |,
#: also the second of two (| `--tls-cert PATH` / `--tls-key PATH` |).
ROW_FLAG = re.compile(r"`(--[a-z0-9-]+) ([^`]+)`")


def documented_placeholders() -> dict[str, str]:
    """Each serve flag's placeholder in the tables of docs/envoy.md and docs/xds.md."""
    found: dict[str, str] = {}
    for name in ("envoy.md", "xds.md"):
        for line in (DOCS / name).read_text().splitlines():
            if not line.startswith("| `--"):
                continue
            cell = line.split(" | ")[0]
            for flag, written in ROW_FLAG.findall(cell):
                # PATH... is one PATH, repeated; K=V,... is the placeholder itself
                shown = written if written.endswith(",...") else written.removesuffix("...")
                found[flag] = shown.replace("\\|", "|")
    return found


def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        _parser().parse_args([*argv, "--help"])
    return capsys.readouterr().out


def test_every_valued_serve_option_has_a_placeholder() -> None:
    """The on/off switches have none; every other option has one (a new option needs its)."""
    valued = {name for name, option in OPTIONS.items() if option.parse is not boolean}
    assert set(METAVARS) == valued


def test_serve_help_placeholders_are_the_docs_tables(capsys: pytest.CaptureFixture[str]) -> None:
    """``--grpc-port N``, ``--reload-interval S``, ``--config-xds HOST:PORT``: what the
    docs' tables write, for every flag a table lists (not GRPC_PORT, RELOAD_INTERVAL...)."""
    documented = documented_placeholders()
    flags = {option.flag: name for name, option in OPTIONS.items()}
    compared = {flag: METAVARS[flags[flag]] for flag in documented if flags.get(flag) in METAVARS}
    assert compared == {flag: documented[flag] for flag in compared}
    assert len(compared) > 60
    text = help_of(["serve"], capsys)
    for shown in ("--grpc-port N", "--reload-interval S", "--config-xds HOST:PORT"):
        assert shown in text
    assert "GRPC_PORT" not in text.replace("RATEWARDEN_GRPC_PORT", "")


def test_quota_mode_help_says_what_the_docs_say(capsys: pytest.CaptureFixture[str]) -> None:
    """Unlimited descriptors do not count; one without a rule or in shadow_mode is never over."""
    text = " ".join(help_of(["serve"], capsys).split())
    assert (
        "--quota-mode, --no-quota-mode deny only when every descriptor but unlimited ones is "
        "over (one without a rule or in shadow_mode counts too and is never over)"
    ) in text


def test_config_help_has_a_description(capsys: pytest.CaptureFixture[str]) -> None:
    """``ratewarden config --help`` says what the command is for, under its usage."""
    lines = help_of(["config"], capsys).splitlines()
    assert lines[2].startswith("Work with rule files")


def test_config_check_help_offers_merge_domains(capsys: pytest.CaptureFixture[str]) -> None:
    """The flag and the variables it follows, as serve reads them."""
    text = " ".join(help_of(["config", "check"], capsys).split())
    assert "--merge-domains, --no-merge-domains" in text
    assert "RATEWARDEN_MERGE_DOMAINS, then MERGE_DOMAIN_CONFIG" in text

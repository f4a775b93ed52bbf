"""A call to a domain no rule file defines is answered OK (as upstream answers it), and the
service says so in its log: a ``domain_not_found`` warning naming the domain, the rules'
domains and the nearest one, at most once a minute per domain, and at most ``MAX_LINES`` such
lines a minute in all. Without it, Envoy's ``domain:`` spelt unlike the rule files' limited
nothing and only a metric showed it."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from envoy.service.ratelimit.v3 import rls_pb2

from ratewarden.server import config
from ratewarden.server.service import RateLimitService
from ratewarden.server.unknown_domains import MAX_LINES
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock
from tests.server.conftest import ALIGNED, OK, desc

RULES = """
domain: public_api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100}
"""


def service() -> tuple[RateLimitService, ManualClock]:
    clock = ManualClock(ALIGNED)
    return RateLimitService(config.loads(RULES), MemoryStore(clock=clock), clock=clock), clock


def ask(rls: RateLimitService, domain: str) -> Any:
    request = rls_pb2.RateLimitRequest(domain=domain, descriptors=[desc(("api_key", "abc"))])
    return rls.should_rate_limit(request)


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    found = [r for r in caplog.records if getattr(r, "event", None) == "domain_not_found"]
    caplog.clear()
    return found


def test_a_misspelt_domain_is_answered_ok_and_warned_of_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """public-api for public_api: OK as before, and one warning naming both, with the nearest
    domain suggested; the same domain again within the minute is not said again, after it is."""
    rls, clock = service()
    caplog.set_level(logging.WARNING, logger="ratewarden.server.service")
    assert ask(rls, "public-api").overall_code == OK
    [line] = warnings(caplog)
    assert line.levelno == logging.WARNING
    assert line.domain == "public-api"  # type: ignore[attr-defined]
    assert line.getMessage() == (
        "a call named domain 'public-api', which the rules in use do not define: its "
        "descriptors were allowed without a rule; the rules' domains: 'public_api' (Envoy's "
        "domain: must be one of them); did you mean 'public_api'?"
    )
    for _ in range(5):
        ask(rls, "public-api")
    clock.advance(59)
    ask(rls, "public-api")
    assert warnings(caplog) == []
    clock.advance(1)
    ask(rls, "public-api")
    assert len(warnings(caplog)) == 1


def test_a_known_domain_is_not_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    """The warning is for unknown domains only: a call to the rules' own domain logs nothing."""
    rls, _ = service()
    caplog.set_level(logging.WARNING, logger="ratewarden.server.service")
    ask(rls, "public_api")
    assert warnings(caplog) == []


def test_each_unknown_domain_is_said_and_the_lines_of_a_minute_are_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A caller sending a new domain on every call gets MAX_LINES lines a minute, not one a
    call; a domain held back then is said in a later minute (it was not marked as said)."""
    rls, clock = service()
    caplog.set_level(logging.WARNING, logger="ratewarden.server.service")
    for number in range(MAX_LINES + 5):
        ask(rls, f"junk-{number}")
    said = warnings(caplog)
    assert [r.domain for r in said] == [f"junk-{n}" for n in range(MAX_LINES)]  # type: ignore[attr-defined]
    ask(rls, f"junk-{MAX_LINES}")
    assert warnings(caplog) == []
    clock.advance(60)
    ask(rls, f"junk-{MAX_LINES}")
    [later] = warnings(caplog)
    assert later.domain == f"junk-{MAX_LINES}"  # type: ignore[attr-defined]


def test_a_long_domain_is_cut_in_the_line(caplog: pytest.LogCaptureFixture) -> None:
    """Any string a caller sends is a domain: the line shows its first 100 characters."""
    rls, _ = service()
    caplog.set_level(logging.WARNING, logger="ratewarden.server.service")
    ask(rls, "x" * 5000)
    [line] = warnings(caplog)
    assert line.domain == "x" * 100 + "..."  # type: ignore[attr-defined]
    assert len(line.getMessage()) < 400

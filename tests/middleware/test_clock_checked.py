"""Every middleware refuses a clock that is not a ``Clock`` when it is built, naming itself.

Taken as is, ``clock=time.time`` or ``clock=5`` turned every selected request into a 500
(an AttributeError on the request path): the concurrency middlewares at a slot's
renewal, the load shedding ones at a refusal's log line, a ``RuleSet`` with a shadow
rule at its report. In Django's ``MIDDLEWARE`` the refusal names the setting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from django.http import HttpResponse
from django.test.utils import override_settings

import tests.middleware.test_wsgi_apps  # noqa: F401  (configures Django first)
from ratewarden import AsyncLimiter, AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.budgets import LoadShedder, TokenBudget
from ratewarden.clock import SystemClock
from ratewarden.middleware import (
    ConcurrencyMiddleware,
    Rule,
    RuleSet,
    SheddingMiddleware,
    SlotPolicy,
    WSGIConcurrencyMiddleware,
    WSGISheddingMiddleware,
    WSGITokenBudgetMiddleware,
)
from ratewarden.middleware.django_concurrency import DjangoConcurrencyMiddleware
from ratewarden.middleware.django_shedding import DjangoSheddingMiddleware
from ratewarden.testing import ManualClock

NOT_CLOCKS = [
    pytest.param(time.time, "that is a function", id="time.time"),
    pytest.param(5, "it has not all of now()", id="5"),
    pytest.param(SystemClock, "that is a class; give an instance", id="the-class"),
]


def _app(environ: Any, start_response: Any) -> list[bytes]:
    return []


BUILDERS: dict[str, tuple[str, Callable[[object], object]]] = {
    "ConcurrencyMiddleware": (
        "concurrency middleware",
        lambda clock: ConcurrencyMiddleware(
            _app, limiter=AsyncLimiter(AsyncMemoryStore()), limit=1, clock=clock
        ),
    ),
    "WSGIConcurrencyMiddleware": (
        "concurrency middleware",
        lambda clock: WSGIConcurrencyMiddleware(
            _app, limiter=Limiter(MemoryStore()), limit=1, clock=clock
        ),
    ),
    "SlotPolicy": ("concurrency middleware", lambda clock: SlotPolicy(limit=1, clock=clock)),
    "SheddingMiddleware": (
        "load shedding middleware",
        lambda clock: SheddingMiddleware(_app, shedder=LoadShedder(lambda: 0.0), clock=clock),
    ),
    "WSGISheddingMiddleware": (
        "load shedding middleware",
        lambda clock: WSGISheddingMiddleware(_app, shedder=LoadShedder(lambda: 0.0), clock=clock),
    ),
    "WSGITokenBudgetMiddleware": (
        "token budget middleware",
        lambda clock: WSGITokenBudgetMiddleware(
            _app,
            budget=TokenBudget(
                MemoryStore(),
                {"requests": "100/minute", "tokens": "10000/minute"},
                max_output_tokens=9,
            ),
            estimate=lambda request: None,
            clock=clock,
        ),
    ),
    "RuleSet": (
        "RuleSet",
        lambda clock: RuleSet([Rule("r", "1/minute", shadow=True)], clock=clock),
    ),
}


@pytest.mark.parametrize("built", sorted(BUILDERS))
@pytest.mark.parametrize(("clock", "says"), NOT_CLOCKS)
def test_a_clock_that_is_not_one_is_refused_when_built(
    built: str, clock: object, says: str
) -> None:
    """Each of the middlewares (and the rule set) refuses it with a ConfigurationError that names
    it, the value and what to give."""
    who, build = BUILDERS[built]
    with pytest.raises(ConfigurationError) as caught:
        build(clock)
    message = str(caught.value)
    assert message.startswith(f"{who} clock={clock!r:.60} is not a ratewarden.clock.Clock")
    assert says in message
    assert "ManualClock()" in message


@pytest.mark.parametrize("built", sorted(BUILDERS))
def test_a_clock_and_none_are_taken(built: str) -> None:
    """A ManualClock is taken as given; leaving the clock out (None) is the system clock."""
    _, build = BUILDERS[built]
    build(ManualClock())
    build(None)


@pytest.mark.parametrize(
    ("middleware", "setting", "value"),
    [
        (
            DjangoConcurrencyMiddleware,
            "RATEWARDEN_CONCURRENCY",
            {"limiter": Limiter(MemoryStore()), "limit": 1, "clock": "time.time"},
        ),
        (
            DjangoSheddingMiddleware,
            "RATEWARDEN_SHEDDING",
            {"shedder": LoadShedder(lambda: 0.0), "clock": "time.time"},
        ),
    ],
)
def test_a_django_setting_with_a_clock_that_is_not_one_is_refused_by_name(
    middleware: Callable[[Any], object], setting: str, value: dict[str, object]
) -> None:
    """``{"clock": "time.time"}`` (a dotted path to a function) in the setting is refused when
    Django builds the middleware, naming the setting, rather than a 500 for every request."""
    with override_settings(**{setting: value}), pytest.raises(ConfigurationError) as caught:
        middleware(lambda request: HttpResponse("never"))
    assert str(caught.value).startswith(f"{setting}: ")
    assert "clock=<built-in function time> is not a ratewarden.clock.Clock" in str(caught.value)

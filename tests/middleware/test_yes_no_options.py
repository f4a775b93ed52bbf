"""Every yes/no option of the middleware and of HeaderOptions takes True or False only.

Read by its truth, the string ``"false"`` would be yes: ``Rule(shadow="false")`` would stop
enforcing a limit. Each such value is refused with a ConfigurationError naming the option and
the value, and nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ratewarden import AsyncMemoryStore, ConfigurationError, Limiter, MemoryStore
from ratewarden.budgets import AsyncTokenBudget, TokenBudget
from ratewarden.checks import check_bool
from ratewarden.headers import HeaderOptions
from ratewarden.middleware import (
    RequestInfo,
    Rule,
    RuleSet,
    TokenBudgetMiddleware,
    WSGITokenBudgetMiddleware,
    by_api_key,
    limit,
)
from ratewarden.middleware.idempotency import IdempotencyMiddleware, WSGIIdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncMemoryIdempotencyStore, MemoryIdempotencyStore
from ratewarden.testing import ManualClock
from tests.middleware._budget_apps import LIMITS, estimate

#: Values that are not a bool, though each has a truth: read by it, "false" and "no" are yes.
NOT_BOOLS = ["false", "no", "", 0, 1, None]


def _app(*args: Any) -> None:
    raise AssertionError("never called: these tests build middlewares")


#: Each yes/no option: how to build its owner with a value, and the option's name in the error.
OPTIONS: dict[str, tuple[Callable[[object], object], str]] = {
    "Rule shadow": (lambda v: Rule("strict", "1/minute", shadow=v), "rule 'strict': shadow"),
    "@limit shadow": (lambda v: limit("1/minute", name="login", shadow=v), "rule 'login': shadow"),
    "HeaderOptions legacy": (lambda v: HeaderOptions(legacy=v), "HeaderOptions legacy"),
    "HeaderOptions github": (
        lambda v: HeaderOptions(legacy=True, github=v),
        "HeaderOptions github",
    ),
    "HeaderOptions partition_key": (
        lambda v: HeaderOptions(partition_key=v),
        "HeaderOptions partition_key",
    ),
    "HeaderOptions all_policies": (
        lambda v: HeaderOptions(all_policies=v),
        "HeaderOptions all_policies",
    ),
    "by_api_key hashed": (lambda v: by_api_key(hashed=v), "by_api_key hashed"),
    "TokenBudgetMiddleware read_body": (
        lambda v: TokenBudgetMiddleware(
            _app,
            budget=AsyncTokenBudget(AsyncMemoryStore(), LIMITS, max_output_tokens=9),
            estimate=estimate,
            read_body=v,
        ),
        "token budget middleware read_body",
    ),
    "WSGITokenBudgetMiddleware ietf": (
        lambda v: WSGITokenBudgetMiddleware(
            _app,
            budget=TokenBudget(MemoryStore(), LIMITS, max_output_tokens=9),
            estimate=estimate,
            ietf=v,
        ),
        "token budget middleware ietf",
    ),
    "IdempotencyMiddleware fail_open": (
        lambda v: IdempotencyMiddleware(_app, AsyncMemoryIdempotencyStore(), fail_open=v),
        "idempotency middleware fail_open",
    ),
    "WSGIIdempotencyMiddleware fail_open": (
        lambda v: WSGIIdempotencyMiddleware(_app, MemoryIdempotencyStore(), fail_open=v),
        "idempotency middleware fail_open",
    ),
}


@pytest.mark.parametrize("value", NOT_BOOLS)
@pytest.mark.parametrize("option", OPTIONS)
def test_a_yes_no_option_refuses_what_is_not_a_bool_naming_option_and_value(
    option: str, value: object
) -> None:
    """``"false"``, ``"no"``, 0, 1, None: refused, the message naming the option and value."""
    build, name = OPTIONS[option]
    with pytest.raises(ConfigurationError) as caught:
        build(value)
    assert str(caught.value) == f"{name} {value!r} must be True or False"


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("value", [True, False])
def test_a_yes_no_option_takes_true_and_false(option: str, value: bool) -> None:
    """The two bools are taken as they are."""
    build, _ = OPTIONS[option]
    build(value)


def test_shadow_false_as_a_string_does_not_stop_enforcing_a_rule() -> None:
    """The walk-through's case: ``shadow="false"`` is refused, not read as shadow mode on."""
    with pytest.raises(ConfigurationError, match="rule 'strict': shadow 'false'"):
        Rule("strict", "1/minute", shadow="false")  # type: ignore[arg-type]


def test_set_shadow_refuses_a_string_and_keeps_the_rule_enforced() -> None:
    """``set_shadow("strict", "false")`` is refused and the rule still blocks."""
    clock = ManualClock()
    ruleset = RuleSet([Rule("strict", "1/hour")], clock=clock)
    limiter = Limiter(MemoryStore(clock=clock))
    request = RequestInfo("GET", "/", "198.51.100.1", {}, {})
    with pytest.raises(
        ConfigurationError, match=r"set_shadow\('strict'\): shadow 'false' must be True or False"
    ):
        ruleset.set_shadow("strict", "false")  # type: ignore[arg-type]
    ruleset.decide(request, ruleset.applicable(request), limiter.hit)
    assert ruleset.decide(request, ruleset.applicable(request), limiter.hit).blocked
    assert ruleset.shadow_report() == {}


def test_check_bool_returns_the_bool() -> None:
    """The shared check hands back the value it was given."""
    assert check_bool("x", True) is True
    assert check_bool("x", False) is False

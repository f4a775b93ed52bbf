"""Every name a module of the library exports is in docs/reference.md, as the first table's are
(tests/test_docs.py): a user who meets ``CircuitOpenError`` or imports ``Steady`` finds it."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ratewarden import TokenBudget
from ratewarden.middleware import RuleSet
from ratewarden.plan import plan

REFERENCE = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text("utf-8")
#: Every backticked name as the reference writes it: `name` or `name(...`.
_MENTIONS = set(re.findall(r"`[A-Za-z_][A-Za-z0-9_]*[`(]", REFERENCE))

#: The modules whose ``__all__`` the reference describes name by name (the limiter's internal
#: names included, listed there as internal).
MODULES = [
    "ratewarden.errors",
    "ratewarden.testing",
    "ratewarden.topk",
    "ratewarden.deprecation",
    "ratewarden.tiers",
    "ratewarden.headers",
    "ratewarden.client",
    "ratewarden.budgets",
    "ratewarden.hotkeys",
    "ratewarden.limiter",
    "ratewarden.storage",
    "ratewarden.checks",
    "ratewarden.regions",
    "ratewarden.simulate",
    "ratewarden.simulate.patterns",
]


@pytest.mark.parametrize("module", MODULES)
def test_every_exported_name_is_in_the_reference(module: str) -> None:
    """Each name of the module's ``__all__`` appears in backticks, alone or called."""
    names = importlib.import_module(module).__all__
    absent = [name for name in names if not {f"`{name}`", f"`{name}("} & _MENTIONS]
    assert not absent, f"docs/reference.md does not describe {module}'s {absent}"


def test_the_patterns_are_named_where_they_are_importable() -> None:
    """The traffic patterns live in ``ratewarden.simulate.patterns``, not its package."""
    from ratewarden import simulate
    from ratewarden.simulate import patterns

    assert "`ratewarden.simulate.patterns` (`Steady`" in REFERENCE
    assert all(hasattr(patterns, name) for name in ("Steady", "Replay"))
    assert not hasattr(simulate, "Steady")


def _parameters(func: Callable[..., Any]) -> str:
    """``func``'s parameters as the reference writes them: names, with the defaults given."""
    found = []
    for param in inspect.signature(func).parameters.values():
        if param.name == "self":
            continue
        if param.kind is inspect.Parameter.KEYWORD_ONLY and "*" not in found:
            found.append("*")
        default = "" if param.default is inspect.Parameter.empty else f"={param.default!r}"
        found.append(param.name + default)
    return ", ".join(found)


@pytest.mark.parametrize(
    ("written", "func"),
    [
        ("settle_id", TokenBudget.settle_id),
        ("settle", TokenBudget.settle),
        ("plan", plan),
        ("decide", RuleSet.decide),
        ("decide_asgi", RuleSet.decide_asgi),
        ("scope_decider", RuleSet.scope_decider),
        ("shadow_report", RuleSet.shadow_report),
    ],
)
def test_a_documented_call_names_the_code_s_parameters(
    written: str, func: Callable[..., Any]
) -> None:
    """The reference wrote ``settle_id(key, id, usage)`` and ``plan(inputs)``; a keyword
    call with those names is refused. (The optional ``failure`` of the rule set's methods is
    described apart, so it is left out of their signatures.)"""
    shown = _parameters(func).removesuffix(", failure=None")
    assert f"`{written}({shown})`" in REFERENCE

"""The ``budget`` descriptor key: what loads, what it round-trips to, and every error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ratewarden.rate import Rate
from ratewarden.server.config import ConfigError, load, loads

FIXTURES = Path(__file__).parent / "fixtures"

BUDGET = """\
domain: llm
descriptors:
  - key: tenant
    budget:
      unit: minute
      tokens_per_unit: 100000
      burst: 150000
      failure_mode: closed
      name: tenant_tokens
    descriptors:
      - key: model
        budget: {unit: Second, unit_multiplier: 10, tokens_per_unit: 500}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
"""


def test_a_budget_loads_as_one_gcra_limit_counting_tokens() -> None:
    """tokens_per_unit per unit (x unit_multiplier), burst, failure_mode and name are kept."""
    rules = {rule.path: rule for rule in loads(BUDGET, "b.yaml").rules}
    tenant = rules["llm.tenant"]
    assert tenant.budget and tenant.algorithm == "gcra"
    assert tenant.rates == (Rate(100000, 60, burst=150000),)
    assert (tenant.failure_mode, tenant.name, tenant.source) == (
        "closed",
        "tenant_tokens",
        "b.yaml:4",
    )
    model = rules["llm.tenant.model"]
    assert model.budget and model.rates == (Rate(500, 10),)
    assert model.limits[0].unit == "second" and model.failure_mode == "open"
    assert not rules["llm.user"].budget


def test_a_budget_round_trips_through_to_dict() -> None:
    """/rlconfig?format=json gives a budget block that loads back to the same rules."""
    loaded = loads(BUDGET, "b.yaml")
    (domain,) = loaded.to_dict()["domains"]
    assert domain["descriptors"][0]["budget"] == {
        "unit": "minute",
        "tokens_per_unit": 100000,
        "burst": 150000,
        "failure_mode": "closed",
        "name": "tenant_tokens",
    }
    again = loads(yaml.safe_dump(domain), "again.yaml")
    assert [(r.path, r.limits, r.budget, r.failure_mode, r.name) for r in again.rules] == [
        (r.path, r.limits, r.budget, r.failure_mode, r.name) for r in loaded.rules
    ]


def test_describe_marks_a_budget() -> None:
    """/rlconfig's text line says budget."""
    line = loads(BUDGET, "b.yaml").describe().splitlines()[0]
    assert line.startswith("llm.tenant: 100000/minute (burst 150000)") and "[budget" in line


def test_configs_without_budget_load_exactly_as_before() -> None:
    """Every valid fixture (envoyproxy/ratelimit YAML and the extensions) has no budget rule."""
    valid = sorted(FIXTURES.glob("valid_*"))
    assert valid
    for path in valid:
        assert not any(rule.budget for rule in load(path).rules), path


# text -> (line, key, words the message must contain)
ERRORS: dict[str, tuple[int, str, str]] = {
    "both": (
        "- key: t\n  rate_limit: {unit: minute, requests_per_unit: 5}\n"
        "  budget: {unit: minute, tokens_per_unit: 5}\n",
        5,
        "budget",
        "rate_limit or budget, not both",
    ),
    "requests": (
        "- key: t\n  budget: {unit: minute, tokens_per_unit: 5, requests_per_unit: 5}\n",
        4,
        "requests_per_unit",
        "write tokens_per_unit",
    ),
    "algorithm": (
        "- key: t\n  budget: {unit: minute, tokens_per_unit: 5, algorithm: gcra}\n",
        4,
        "algorithm",
        "always gcra",
    ),
    "local": (
        "- key: t\n  budget: {unit: minute, tokens_per_unit: 5, failure_mode: local}\n",
        4,
        "failure_mode",
        "use open or closed",
    ),
    "unknown failure mode": (
        "- key: t\n  budget: {unit: minute, tokens_per_unit: 5, failure_mode: maybe}\n",
        4,
        "failure_mode",
        "unknown failure_mode 'maybe'",
    ),
    "missing tokens": ("- key: t\n  budget: {unit: minute}\n", 4, "tokens_per_unit", "missing"),
    "zero tokens": (
        "- key: t\n  budget: {unit: minute, tokens_per_unit: 0}\n",
        4,
        "tokens_per_unit",
        "out of range",
    ),
    "tokens not a number": (
        "- key: t\n  budget: {unit: minute, tokens_per_unit: lots}\n",
        4,
        "tokens_per_unit",
        "whole number",
    ),
    "missing unit": ("- key: t\n  budget: {tokens_per_unit: 5}\n", 4, "unit", "missing"),
    "bad unit": (
        "- key: t\n  budget: {unit: fortnight, tokens_per_unit: 5}\n",
        4,
        "unit",
        "invalid budget unit 'fortnight'",
    ),
    "unknown key": (
        "- key: t\n  budget:\n    unit: minute\n    tokens_per_unit: 5\n    per_tenant: true\n",
        7,
        "per_tenant",
        "unknown key in budget",
    ),
    "not a mapping": ("- key: t\n  budget: 5\n", 4, "budget", "must be a mapping"),
    "tokens in rate_limit": (
        "- key: t\n  rate_limit: {unit: minute, tokens_per_unit: 5}\n",
        4,
        "tokens_per_unit",
        "belongs in budget",
    ),
    "budget in rate_limit": (
        "- key: t\n  rate_limit: {unit: minute, requests_per_unit: 5, budget: {}}\n",
        4,
        "budget",
        "belongs in a descriptor (an item of descriptors:)",
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_a_bad_budget_is_refused_with_file_line_and_key(case: str) -> None:
    """Each mistake is one problem naming the file, the line and the offending key."""
    body, line, key, words = ERRORS[case]
    text = "domain: llm\ndescriptors:\n" + "".join(f"  {row}\n" for row in body.splitlines())
    with pytest.raises(ConfigError) as caught:
        loads(text, "bad.yaml")
    problems = [(p.file, p.line, p.key) for p in caught.value.errors]
    assert ("bad.yaml", line, key) in problems, caught.value
    assert any(words in p.message for p in caught.value.errors), caught.value
    assert str(caught.value).count("bad.yaml:") == len(caught.value.errors)

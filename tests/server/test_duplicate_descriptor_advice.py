"""Two entries with the same descriptor ``key:`` (a first try at two limits on one key) are
refused saying how to merge them: both limits in one entry's ``rate_limit: limits:`` list,
the section of docs/config.md that shows it named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ratewarden.rate import Rate
from ratewarden.server.config import ConfigError, loads

CONFIG_MD = Path(__file__).parents[2] / "docs" / "config.md"

TWICE = """\
domain: d
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 1000}
"""

MERGED = """\
domain: d
descriptors:
  - key: api_key
    rate_limit:
      limits:
        - {unit: second, requests_per_unit: 10}
        - {unit: hour, requests_per_unit: 1000}
"""


def test_the_duplicate_says_to_list_both_limits_under_one_entry() -> None:
    """It said only 'merge the two entries'; it now names the limits: list and where the
    docs show it (an anchor config.md has), and the entry so merged loads: one rule of both
    rates."""
    with pytest.raises(ConfigError) as caught:
        loads(TWICE)
    (problem,) = caught.value.errors
    assert problem.line == 5 and problem.key == "key"
    assert "duplicate descriptor 'd.api_key'" in problem.message
    assert "rate_limit: limits: list" in problem.message
    (anchor,) = re.findall(r"docs/config\.md#([a-z0-9-]+)", problem.message)
    headings = re.findall(r"^#+ (.+)$", CONFIG_MD.read_text(), flags=re.MULTILINE)
    slugs = {re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-") for heading in headings}
    assert anchor in slugs
    (rule,) = loads(MERGED).rules
    assert list(rule.rates) == [Rate(10, 1), Rate(1000, 3600)]

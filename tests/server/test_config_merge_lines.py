"""A problem with a value merged in with ``<<`` is said at the mapping it was merged into.

The anchor's own rule may be valid (gcra with a burst): the rule that merges it and changes
the algorithm is the one to fix, so the line is that rule's, and the message says where the
value comes from. Problems in the anchor's own rule keep its line.
"""

from __future__ import annotations

import pytest

from ratewarden.server import config

MERGED = """\
domain: d
descriptors:
  - key: a
    rate_limit: &lim {algorithm: gcra, unit: second, requests_per_unit: 5, burst: 9}
  - key: c
    rate_limit:
      <<: *lim
      algorithm: fixed_window
"""

UNKNOWN = """\
domain: d
descriptors:
  - key: a
    rate_limit: &lim {unit: second, requests_per_unit: 5, brust: 3}
  - key: c
    rate_limit:
      <<: *lim
      unit: minute
"""


def problems(text: str) -> list[str]:
    with pytest.raises(config.ConfigError) as caught:
        config.loads(text, "m.yaml")
    return str(caught.value).splitlines()


def test_a_merged_burst_on_a_window_rule_is_said_at_the_rule_that_merged_it() -> None:
    [line] = [p for p in problems(MERGED) if "burst" in p]
    assert line.startswith("m.yaml:7: burst: rate 5/second (burst 9): the fixed_window")
    assert line.endswith("(this value comes from line 4, merged in with <<)")


def test_a_merged_unknown_key_is_said_at_both_rules() -> None:
    """The anchor's own rule at its line; the rule that merged it at its own, saying whence."""
    found = [p for p in problems(UNKNOWN) if "brust" in p]
    assert len(found) == 2, found
    assert found[0].startswith("m.yaml:4: brust: unknown key in rate_limit")
    assert "merged in" not in found[0]
    assert found[1].startswith("m.yaml:7: brust: unknown key in rate_limit")
    assert found[1].endswith("(this value comes from line 4, merged in with <<)")

"""A burst on a window algorithm is refused in words that read right in Python and in a rule
file alike: "drop the burst", not "drop burst=" (a Python keyword shown to someone writing
YAML), and every bucket algorithm named as the way to keep it, leaky_bucket too."""

from __future__ import annotations

import pytest

from ratewarden import ConfigurationError, Limiter, Rate
from ratewarden.server.config import ConfigError, loads

WINDOWS = ("fixed_window", "sliding_window", "sliding_log")
ADVICE = (
    "has no separate burst; drop the burst or use a bucket algorithm "
    "(gcra, token_bucket, leaky_bucket)"
)


@pytest.mark.parametrize("algorithm", WINDOWS)
def test_a_limiter_refuses_a_burst_on_a_window_in_plain_words(algorithm: str) -> None:
    """The rate, the algorithm, what it counts, and the two ways out."""
    with pytest.raises(ConfigurationError) as refused:
        Limiter(algorithm=algorithm).hit("k", Rate(10, 60, burst=20))
    assert str(refused.value).endswith(ADVICE)
    assert "burst=" not in str(refused.value)


@pytest.mark.parametrize("algorithm", WINDOWS)
def test_a_rule_file_refuses_a_burst_on_a_window_at_its_line(algorithm: str) -> None:
    """The rule file's error names the burst's line and gives the same advice, with no Python
    keyword syntax in it."""
    text = (
        "domain: d\n"
        "descriptors:\n"
        "  - key: k\n"
        "    rate_limit:\n"
        f"      algorithm: {algorithm}\n"
        "      unit: second\n"
        "      requests_per_unit: 20\n"
        "      burst: 40\n"
    )
    with pytest.raises(ConfigError) as refused:
        loads(text, "rules.yaml")
    message = str(refused.value)
    assert "rules.yaml:8: burst: " in message
    assert ADVICE in message
    assert "burst=" not in message

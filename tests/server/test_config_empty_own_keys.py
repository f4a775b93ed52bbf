"""ratewarden's own rule keys given empty, and numbers written in a form YAML does not read as one.

``failure_mode:``, ``~`` or ``null`` (and ``algorithm``, ``burst``) used to load as the key's
default: a ``closed`` rule left half-edited became an open one. Upstream's configs have none
of these keys, so an empty one is refused at its line, saying what to write. A whole number
quoted, or written with an exponent or a fraction of zero, is refused saying how to write it.
"""

from __future__ import annotations

import pytest

from ratewarden.server import config

HEAD = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n"


def problems(text: str) -> str:
    with pytest.raises(config.ConfigError) as caught:
        config.loads(HEAD + text, "t.yaml")
    return str(caught.value)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("failure_mode: ~", "t.yaml:8: failure_mode: is empty; give one of open, closed, local"),
        ("failure_mode:", "t.yaml:8: failure_mode: is empty; give one of open, closed, local"),
        ("failure_mode: null", "(--failure-mode's without the line)"),
        ("algorithm: null", "t.yaml:7: algorithm: is empty; give one of fixed_window, gcra"),
        ("burst: ~", "t.yaml:8: burst: is empty; give a whole number (requests_per_unit"),
    ],
)
def test_an_own_key_given_empty_is_refused_at_its_line(line: str, said: str) -> None:
    text = f"      algorithm: gcra\n      unit: second\n      requests_per_unit: 3\n      {line}\n"
    if line.startswith("algorithm"):
        text = f"      unit: second\n      requests_per_unit: 3\n      {line}\n"
    found = problems(text)
    assert said in found
    assert found.count("is empty") == 1


def test_an_empty_burst_in_a_limits_item_is_refused() -> None:
    item = "{unit: second, requests_per_unit: 3, burst: }"
    text = f"      algorithm: gcra\n      limits:\n        - {item}\n"
    assert "t.yaml:7: burst: is empty; give a whole number" in problems(text)


def test_an_upstream_key_given_empty_keeps_upstreams_reading() -> None:
    """``shadow_mode:`` (upstream's key) empty is false, as yaml.v2 reads it: loads."""
    loaded = config.loads(
        HEAD + "      unit: second\n      requests_per_unit: 3\n    shadow_mode:\n", "t.yaml"
    )
    assert loaded is not None


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ('"10"', "must be a whole number, not '10'; drop the quotes"),
        ("1e3", "must be a whole number, not '1e3'; write it in digits: 1000"),
        ("10.0", "must be a whole number, not '10.0'; write it in digits: 10"),
        ('"1e3"', "must be a whole number, not '1e3'; write it in digits without quotes: 1000"),
        ("10.5", "must be a whole number, not '10.5'\n"),
        ('"lots"', "must be a whole number, not 'lots'\n"),
    ],
)
def test_a_number_not_written_as_a_whole_number_says_how_to_write_it(value: str, said: str) -> None:
    found = problems(f"      unit: second\n      requests_per_unit: {value}\n") + "\n"
    assert f"t.yaml:6: requests_per_unit: {said}" in found

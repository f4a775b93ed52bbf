"""``--reload-interval`` has a floor: 0 turns reload off, and anything else is at least
0.1 s, since each check looks at every config file (0.001 took 15% of a core)."""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.server.options import read
from ratewarden.server.settings import resolve


@pytest.mark.parametrize("given", ["0.001", "0.05", "0.099"])
def test_an_interval_below_the_floor_is_refused_naming_the_flag_and_the_floor(given: str) -> None:
    """A value in milliseconds by mistake, or a too eager poll, stops the start."""
    with pytest.raises(ConfigurationError) as refused:
        read({"reload_interval": given}, {})
    message = str(refused.value)
    assert message.startswith(f"--reload-interval {given!r}: {given} is below 0.1 s")
    assert "0 turns reload off" in message and "seconds, not milliseconds" in message


def test_the_variable_is_held_to_the_same_floor() -> None:
    """RATEWARDEN_RELOAD_INTERVAL is read by the same parser as the flag."""
    with pytest.raises(ConfigurationError) as refused:
        read({}, {"RATEWARDEN_RELOAD_INTERVAL": "0.01"})
    assert str(refused.value).startswith("RATEWARDEN_RELOAD_INTERVAL '0.01': 0.01 is below 0.1 s")


@pytest.mark.parametrize(("given", "interval"), [("0", 0.0), ("0.1", 0.1), ("2.5", 2.5)])
def test_zero_and_the_floor_and_above_are_taken(given: str, interval: float) -> None:
    """0 (reload off), the floor itself and anything above it start."""
    settings = resolve({"config_paths": ["rules/"], "reload_interval": given}, {})
    assert settings.reload_interval == interval

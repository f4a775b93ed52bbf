"""An algorithm written another way (``'GCRA'``, ``'sliding-window'``, ``'token bucket'``).

The refusal listed the choices but named none of them, though the keyword refusals suggest
the nearest name; it now ends with the algorithm meant when case, ``-``, ``_`` or spaces are
all that differ.
"""

from __future__ import annotations

import pytest

from ratewarden import ConfigurationError, Limiter


def _refused(given: str) -> str:
    with pytest.raises(ConfigurationError) as refused:
        Limiter(algorithm=given)
    return str(refused.value)


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("GCRA", "gcra"),
        ("sliding-window", "sliding_window"),
        ("token bucket", "token_bucket"),
        (" Leaky-Bucket ", "leaky_bucket"),
        ("Fixed__Window", "fixed_window"),
    ],
)
def test_an_algorithm_written_another_way_names_the_one_meant(given: str, meant: str) -> None:
    """Case, ``-`` and spaces: the refusal ends with the algorithm's name."""
    message = _refused(given)
    assert message.startswith(f"unknown algorithm {given!r}; choose one of: fixed_window, gcra")
    assert message.endswith(f"; did you mean {meant!r}?")


def test_an_unknown_algorithm_gets_no_guess() -> None:
    """Nothing close by those rules: the choices alone."""
    assert _refused("gcra2").endswith("sliding_window, token_bucket")

"""``SpaceSaving`` refuses a bad capacity as the rest of the API refuses bad input."""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.topk import SpaceSaving


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True, "10"])
def test_a_bad_capacity_is_a_configuration_error_and_still_a_value_error(
    capacity: object,
) -> None:
    """A ``ConfigurationError`` naming the class and the value; it is a ``ValueError`` too,
    so code that caught the plain ``ValueError`` it used to be still catches it."""
    with pytest.raises(ConfigurationError) as raised:
        SpaceSaving(capacity)  # type: ignore[arg-type]
    assert isinstance(raised.value, ValueError)
    assert str(raised.value) == f"SpaceSaving capacity {capacity!r} must be a whole number >= 1"

"""Every flag ``ratewarden plan --help`` lists is in docs/capacity.md too."""

from __future__ import annotations

from tests.simulate.test_flags_documented import undocumented


def test_every_plan_flag_is_in_the_guide() -> None:
    """--key-length (the keys --measure writes) was in the help alone."""
    assert undocumented("plan", "capacity.md") == set()

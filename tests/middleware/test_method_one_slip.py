"""A rule's methods: a name one slip of the fingers from a standard method (two letters swapped,
one added or dropped) is refused with the method meant, as difflib's closeness alone missed
for three-letter names (``GTE`` for GET): such a rule would silently match nothing."""

from __future__ import annotations

import pytest

from ratewarden import ConfigurationError
from ratewarden.middleware import Rule


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("GTE", "GET"), ("EGT", "GET"), ("PTU", "PUT"), ("GETT", "GET"), ("PST", "POST"),
     ("PSOT", "POST"), ("DELEET", "DELETE")],
)  # fmt: skip
def test_a_method_one_slip_from_a_standard_one_is_refused(typed: str, meant: str) -> None:
    """The rule is refused, naming the typo and the method it is close to."""
    with pytest.raises(ConfigurationError) as raised:
        Rule("r", "10/s", methods=[typed])
    assert str(raised.value) == (
        f"rule 'r' methods: {typed!r} is not a method in use (a typo would select no request); "
        f"did you mean {meant}?"
    )


@pytest.mark.parametrize("method", ["GET", "patch", "PURGE", "PROPFIND", "PUSH", "SET", "LIST"])
def test_methods_in_use_and_others_far_from_a_standard_one_are_taken(method: str) -> None:
    """Standard and registered methods are taken, and so is a name of one's own that is not a
    slip (one letter changed in three, SET, may be a method of its own)."""
    assert Rule("r", "10/s", methods=[method]).methods == frozenset({method.upper()})

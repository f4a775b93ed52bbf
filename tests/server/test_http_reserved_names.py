"""``--legacy-header-names`` refuses the headers HTTP reserves.

``--legacy-header-names content-length,X-R,X-T`` was accepted: Envoy would have been asked to
add a second ``content-length``. A name HTTP reserves, or one every response already carries,
is now refused at start.
"""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.server.response_headers import RESERVED_NAMES, check_header_names
from ratewarden.server.settings import resolve


@pytest.mark.parametrize(
    ("names", "bad", "instead"),
    [
        ("content-length,X-R,X-T", "content-length", "RateLimit-Limit"),
        ("X-L,Transfer-Encoding,X-T", "Transfer-Encoding", "RateLimit-Remaining"),
        ("X-L,X-R,Connection", "Connection", "RateLimit-Reset"),
        ("Host,X-R,X-T", "Host", "RateLimit-Limit"),
        ("X-L,Content-Type,X-T", "Content-Type", "RateLimit-Remaining"),
    ],
)
def test_a_name_http_reserves_is_refused_at_start(names: str, bad: str, instead: str) -> None:
    """Refused naming the flag, the name and one to use instead, in any case."""
    with pytest.raises(ConfigurationError) as raised:
        resolve({"legacy_header_names": names}, {"RATEWARDEN_CONFIG": "r"})
    said = str(raised.value)
    assert said.startswith(f"--legacy-header-names {names!r}: {bad!r} is a header HTTP reserves")
    assert said.endswith(f"pick another name, such as {instead}")


def test_the_environment_variable_is_checked_the_same_way() -> None:
    """RATEWARDEN_LEGACY_HEADER_NAMES goes through the same check."""
    with pytest.raises(ConfigurationError, match="'date' is a header HTTP reserves"):
        resolve({}, {"RATEWARDEN_CONFIG": "r", "RATEWARDEN_LEGACY_HEADER_NAMES": "date,X-R,X-T"})


def test_every_reserved_name_is_refused_and_custom_names_pass() -> None:
    """The whole list is refused; names of one's own (upstream's X-RateLimit-*) still pass."""
    for name in sorted(RESERVED_NAMES):
        with pytest.raises(ValueError, match=f"{name!r} is a header HTTP reserves"):
            check_header_names([name, "X-R", "X-T"])
    names = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
    assert check_header_names(names) == names

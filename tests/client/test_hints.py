"""Reading the server's retry hints: Retry-After, RateLimit, legacy resets; never crashing."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from email.utils import format_datetime

from hypothesis import given
from hypothesis import strategies as st

from ratewarden.client import retry_hint
from ratewarden.client._hints import no_wait_helps

NOW = 1_700_000_000.0


def test_retry_after_delay_seconds() -> None:
    """``Retry-After: 2`` is two seconds, whatever the header's case."""
    assert retry_hint({"Retry-After": "2"}, NOW) == 2.0
    assert retry_hint({"retry-after": " 120 "}, NOW) == 120.0


def test_retry_after_http_date_counts_from_now() -> None:
    """An HTTP-date is a wait until that instant; one in the past means no wait."""
    when = datetime.fromtimestamp(NOW + 7, UTC)
    assert retry_hint({"Retry-After": format_datetime(when, usegmt=True)}, NOW) == 7.0
    past = datetime.fromtimestamp(NOW - 30, UTC)
    assert retry_hint({"Retry-After": format_datetime(past, usegmt=True)}, NOW) == 0.0


def test_ratelimit_field_takes_longest_reset_of_exhausted_policies() -> None:
    """Only policies with r=0 count, and the client waits for the last of them."""
    header = '"burst";r=0;t=5, "hour";r=0;t=900, "day";r=40;t=80000'
    assert retry_hint({"RateLimit": header}, NOW) == 900.0
    assert retry_hint({"RateLimit": '"burst";r=3;t=5'}, NOW) is None


def test_ratelimit_field_with_quoted_commas_and_partition_keys() -> None:
    """Separators inside a quoted name or pk do not split the item."""
    header = '"a,b;c";r=0;t=12;pk=:YWJj:, "x";r=1;t=1'
    assert retry_hint({"RateLimit": header}, NOW) == 12.0


def test_retry_after_wins_over_ratelimit() -> None:
    """The draft says clients give Retry-After precedence over the window."""
    headers = {"Retry-After": "3", "RateLimit": '"q";r=0;t=60'}
    assert retry_hint(headers, NOW) == 3.0


def test_legacy_reset_epoch_and_delta() -> None:
    """X-RateLimit-Reset as epoch seconds (GitHub) or as a delta; ignored while quota remains."""
    epoch = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW) + 42)}
    assert retry_hint(epoch, NOW) == 42.0
    assert retry_hint({"X-RateLimit-Reset": "9"}, NOW) == 9.0
    assert retry_hint({"X-RateLimit-Remaining": "5", "X-RateLimit-Reset": "9"}, NOW) is None
    envoy = {"RateLimit-Limit": "10", "RateLimit-Remaining": "0", "RateLimit-Reset": "4"}
    assert retry_hint(envoy, NOW) == 4.0


def test_malformed_hints_fall_through() -> None:
    """A broken Retry-After lets the next hint speak; with none left, there is no hint."""
    assert retry_hint({"Retry-After": "soon", "RateLimit": '"q";r=0;t=6'}, NOW) == 6.0
    for bad in ("-1", "1e9", "inf", "nan", "0x10", "", "Mon, 99 Foo 2024 25:61:00 GMT"):
        assert retry_hint({"Retry-After": bad}, NOW) is None, bad
    assert retry_hint({"RateLimit": '"q";r=zero;t=5, "p";r=0;t=-1'}, NOW) is None


header_names = st.sampled_from(
    [
        "Retry-After",
        "RateLimit",
        "X-RateLimit-Reset",
        "X-RateLimit-Remaining",
        "RateLimit-Reset",
        "RateLimit-Remaining",
    ]
)
header_values = st.one_of(
    st.text(max_size=60),
    st.from_regex(r'"[a-z]*";r=-?\d{0,20};t=[\d.e+-]{0,25}', fullmatch=True),
    st.from_regex(r"[A-Za-z]{3}, \d{1,3} [A-Za-z]{3} -?\d{1,6} \d\d:\d\d:\d\d [A-Z+\-\d]{0,5}"),
)


@given(
    headers=st.dictionaries(header_names, header_values, max_size=6),
    now=st.floats(min_value=0, max_value=4e9, allow_nan=False),
)
def test_any_header_values_give_a_finite_non_negative_hint_or_none(
    headers: dict[str, str], now: float
) -> None:
    """Whatever the server sends, reading it never raises and never asks for a negative wait."""
    hint = retry_hint(headers, now)
    assert hint is None or (math.isfinite(hint) and hint >= 0)


def test_no_wait_helps_only_when_every_listed_policy_has_quota_left() -> None:
    """A 429 without Retry-After whose RateLimit field reports r>0 for every policy invites no
    retry; an exhausted policy, a Retry-After, no field or an unreadable r keeps the retry."""
    assert no_wait_helps({"RateLimit": '"c";r=10;t=6'})
    assert no_wait_helps({"ratelimit": '"a";r=7;t=6, "b";r=97;t=36'})
    assert not no_wait_helps({"RateLimit": '"a";r=7;t=6, "b";r=0;t=36'})
    assert not no_wait_helps({"RateLimit": '"c";r=10;t=6', "Retry-After": "5"})
    assert not no_wait_helps({"X-RateLimit-Remaining": "10"})
    assert not no_wait_helps({"RateLimit": '"c";r=many;t=6'})
    assert not no_wait_helps({"RateLimit": ""})

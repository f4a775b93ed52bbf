"""The requests helpers and the transports name a misplaced argument when built: a
misspelt keyword, a session that is none, urllib3's own retries, a policy given where
the inner transport goes."""

from __future__ import annotations

from typing import Any

import pytest
import requests
import urllib3

from ratewarden.client import (
    AsyncRetryTransport,
    RetryBudget,
    RetryPolicy,
    RetryTransport,
    retry_adapter,
    retry_session,
)
from ratewarden.errors import ConfigurationError


@pytest.mark.parametrize(
    ("given", "nearest"),
    [({"polcy": RetryPolicy()}, "policy"), ({"pool_maxsiz": 20}, "pool_maxsize")],
)
def test_a_misspelt_adapter_keyword_names_the_nearest(given: dict[str, Any], nearest: str) -> None:
    """Ours and HTTPAdapter's keywords are one list: a slip in either gets "did you mean",
    not HTTPAdapter's TypeError."""
    with pytest.raises(
        ConfigurationError, match=rf"retry_adapter: unknown .*did you mean {nearest}"
    ):
        retry_adapter(**given)


@pytest.mark.parametrize("retries", [3, True, urllib3.Retry(2)])
def test_urllib3_retries_are_refused(retries: object) -> None:
    """max_retries would multiply the adapter's own retries: refused, saying to leave it out.
    Its default, 0, is taken."""
    with pytest.raises(ConfigurationError, match=r"max_retries=.*leave it out"):
        retry_adapter(max_retries=retries)
    assert isinstance(retry_adapter(max_retries=0, pool_maxsize=20), requests.adapters.HTTPAdapter)


def test_a_session_that_is_none_is_refused() -> None:
    """retry_session(session="x") names the argument, not AttributeError's 'mount'."""
    with pytest.raises(ConfigurationError, match="session='x' has no mount"):
        retry_session(session="x")


@pytest.mark.parametrize("cls", [RetryTransport, AsyncRetryTransport])
@pytest.mark.parametrize(
    ("value", "keyword"), [(RetryPolicy(), "policy"), (RetryBudget(), "budget")]
)
def test_a_policy_given_as_the_transport_says_which_keyword(
    cls: type[Any], value: object, keyword: str
) -> None:
    """RetryTransport(RetryPolicy()) puts the policy where the inner transport goes."""
    with pytest.raises(
        ConfigurationError, match=rf"first argument is the inner .*did you mean {keyword}="
    ):
        cls(value)

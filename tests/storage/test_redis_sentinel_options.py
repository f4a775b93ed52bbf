"""A Sentinel URL's client options are checked when the store is made, as a plain URL's and a
Cluster's are: an option redis-py refuses is a ConfigurationError, not a TypeError at each call."""

from __future__ import annotations

from typing import Any

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.storage.regions import AsyncRegionStore, RegionStore

STORES = (RedisStore, AsyncRedisStore, RegionStore, AsyncRegionStore)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"bogus": 1}, "bogus"),
        ({"credential_provider": 5}, "cannot be passed along with 'credential_provider'"),
    ],
)
@pytest.mark.parametrize("scheme", ["redis+sentinel", "rediss+sentinel"])
def test_an_option_a_sentinel_primary_refuses_fails_at_from_url(
    scheme: str, options: dict[str, Any], said: str
) -> None:
    """No connection is made (port 1): the option itself is refused, and named."""
    for store_class in STORES:
        with pytest.raises(ConfigurationError, match="rejected an option") as caught:
            store_class.from_url(f"{scheme}://u:hunter2@127.0.0.1:1/mymaster", **options)
        assert said in str(caught.value)
        assert "hunter2" not in str(caught.value)

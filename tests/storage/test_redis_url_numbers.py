"""Store URLs whose numbers or hosts are malformed: every one a ConfigurationError naming the
part, for every store that takes a URL; numbers are ASCII digits only."""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.storage.regions import AsyncRegionStore, RegionStore

STORES = (RedisStore, AsyncRedisStore, RegionStore, AsyncRegionStore)

MALFORMED = [
    ("redis://[::1", "host '[::1' is not HOST[:PORT]"),
    ("redis://:secret@[::1", "host '[::1' is not HOST[:PORT]"),
    ("rediss://[::1/0", "host '[::1' is not HOST[:PORT]"),
    ("redis+sentinel://h:\u00b2/svc", "port '\u00b2' of host 'h:\u00b2'"),
    ("redis+cluster://h:\u00b2", "port '\u00b2' of host 'h:\u00b2'"),
    ("redis+cluster://h:\u0663", "port '\u0663' of host 'h:\u0663'"),
    ("redis://h/\u00b2", "database '\u00b2' in the path"),
    ("redis+sentinel://h/svc/\u00b2", "database '\u00b2' in the path"),
    ("redis://h:6379/1?db=\u00b2", "database '\u00b2' in ?db="),
    ("redis://h/\u0663", "database '\u0663' in the path"),
    ("redis://h?db=\u0663", "database '\u0663' in ?db="),
    ("redis://h?db=-1", "database '-1' in ?db="),
    ("unix:///run/redis.sock?db=x", "database 'x' in ?db="),
]


@pytest.mark.parametrize(("url", "part"), MALFORMED)
def test_a_malformed_url_is_a_configuration_error_naming_the_part(url: str, part: str) -> None:
    """No raw ValueError: each store's from_url refuses the URL naming what is wrong."""
    for store_class in STORES:
        with pytest.raises(ConfigurationError, match="store URL") as caught:
            store_class.from_url(url)
        assert part in str(caught.value), store_class
        assert "secret" not in str(caught.value)

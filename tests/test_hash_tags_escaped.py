"""A user's own Cluster hash tag does not co-locate keys: the whole key is escaped inside
ratewarden's braces (storage.md, hit_all). On a 3-primary Cluster, ``hit_all`` of ``{g}:a`` and
``{g}:b`` returns None (their escaped keys are on different slots), while one key's layered call
is one slot and is decided; a user's braces never break the layout."""

from __future__ import annotations

import pytest
import redis
from redis.crc import key_slot

from ratewarden import Rate
from ratewarden.storage._keys import state_key
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

PER_SECOND, PER_MINUTE = Rate.parse("5/second"), Rate.parse("100/minute")


def test_the_users_braces_are_escaped_inside_ratewardens() -> None:
    """``{g}:a`` is stored under the tag ``%7Bg%7D:a``, so ``{g}:a`` and ``{g}:b`` hash apart."""
    first = state_key("rw", "{g}:a", "gcra", PER_SECOND)
    second = state_key("rw", "{g}:b", "gcra", PER_SECOND)
    assert first.startswith("rw:{%7Bg%7D:a}:")
    assert key_slot(first.encode()) != key_slot(second.encode())


def test_hit_all_of_user_tagged_keys_is_none_on_a_cluster(
    cluster_client: redis.RedisCluster,
) -> None:
    """Nothing is sent for keys on two slots, whatever tag the user gave them; one key with two
    rates is one slot and is decided."""
    store = RedisStore(cluster_client, clock=ManualClock(1_699_999_980))
    tagged = [("{g}:a", PER_SECOND, 1), ("{g}:b", PER_SECOND, 1)]
    assert store.hit_all("gcra", tagged) is None
    decisions = store.hit_all("gcra", [("{g}:a", (PER_SECOND, PER_MINUTE), 1)])
    assert decisions is not None and decisions[0].allowed

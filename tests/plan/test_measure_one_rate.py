"""measure() takes one Rate: a layered limit's list, or text, is a ConfigurationError before
anything is sent, not an AttributeError after the keys were checked on the server."""

from __future__ import annotations

import pytest
import redis

from ratewarden import ConfigurationError, Rate
from ratewarden.storage.measure import measure
from ratewarden.storage.redis import RedisStore

LAYERS = [Rate.parse("100/minute"), Rate.parse("1000/hour")]


@pytest.mark.parametrize("limit", [LAYERS, tuple(LAYERS)], ids=["list", "tuple"])
def test_a_layered_limit_is_refused_saying_to_measure_each_layer(
    redis_client: redis.Redis, limit: object
) -> None:
    """Several rates are refused with how to measure them, and nothing is written."""
    store = RedisStore(redis_client)
    with pytest.raises(ConfigurationError) as raised:
        measure(store, "gcra", limit)  # type: ignore[arg-type]
    assert str(raised.value).startswith("measure takes one Rate, not 2 (a layered limit")
    assert "measure each layer's Rate on its own" in str(raised.value)
    assert redis_client.dbsize() == 0


def test_text_is_refused_with_how_to_parse_it() -> None:
    """A rate as text names Rate.parse (no Redis is reached: the port is shut)."""
    store = RedisStore(redis.Redis(port=1))
    with pytest.raises(ConfigurationError) as raised:
        measure(store, "gcra", "100/minute")  # type: ignore[arg-type]
    assert str(raised.value) == (
        "measure: limit '100/minute' is not a Rate; use Rate.parse('100/minute')"
    )


def test_one_rate_is_still_measured(redis_client: redis.Redis) -> None:
    """The check leaves one Rate alone: it is measured, and its keys are deleted after."""
    found = measure(RedisStore(redis_client), "gcra", Rate.parse("10/minute"), calls=20)
    assert found.filled == 10 and found.key_bytes > 0
    assert redis_client.dbsize() == 0

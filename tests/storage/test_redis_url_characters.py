"""Characters a store URL cannot hold where they stand: a fragment, a space or a control
character is refused, where redis-py dropped the fragment, Sentinel took it into the service
name and a host 'h ' or 'h\\n' was accepted."""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore


@pytest.mark.parametrize(
    ("url", "part"),
    [
        ("redis://h:6379/0#x", "takes no #fragment"),
        ("redis+sentinel://h/mymaster#x", "takes no #fragment"),
        ("redis+cluster://h:6379#x", "takes no #fragment"),
        ("redis+sentinel://:p#ss@h/svc", "must be percent-encoded"),
        ("redis://h :6379", "space or control character (' ' at offset 9)"),
        ("redis://h\n", "space or control character ('\\n' at offset 9)"),
        ("redis+cluster://h\t:6379", "space or control character ('\\t' at offset 17)"),
    ],
)
def test_a_fragment_a_space_or_a_control_character_is_refused(url: str, part: str) -> None:
    """Each is a ConfigurationError naming it, for both stores."""
    for store_class in (RedisStore, AsyncRedisStore):
        with pytest.raises(ConfigurationError, match="store URL") as caught:
            store_class.from_url(url)
        assert part in str(caught.value)


def test_a_password_option_is_hidden_whole_even_with_a_hash() -> None:
    """?password=se#cret: the whole value is ***, not only the part before the #."""
    with pytest.raises(ConfigurationError) as caught:
        RedisStore.from_url("redis://h:6379/0?password=se#cret")
    assert "cret" not in str(caught.value)

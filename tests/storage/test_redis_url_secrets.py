"""Store URLs and passwords: no message shows one, whatever characters it holds, and a
password that was not percent-encoded is refused saying how to write it."""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.storage.redis import AsyncRedisStore, RedisStore

# (URL, the password in it): each password holds a character that splits the URL wrongly
UNENCODED = [
    ("redis://u:top/secret@127.0.0.1:41063/0", "top/secret"),
    ("redis+sentinel://:se/cret@h/svc", "se/cret"),
    ("redis+cluster://u:se/cret@h:abc", "se/cret"),
    ("redis://:p@ss/w#rd?@127.0.0.1:44015/0", "p@ss/w#rd?"),
    ("redis://:p#ss@h", "p#ss"),
    ("rediss://u:a?b@h:6380/0", "a?b"),
]


@pytest.mark.parametrize(("url", "password"), UNENCODED)
def test_an_unencoded_password_is_refused_saying_to_percent_encode_it(
    url: str, password: str
) -> None:
    """The message says to percent-encode, and shows none of the password, not even a part."""
    for store_class in (RedisStore, AsyncRedisStore):
        with pytest.raises(ConfigurationError, match="must be percent-encoded") as caught:
            store_class.from_url(url)
        message = str(caught.value)
        assert "***@" in message
        for piece in {password, *password.replace("@", "/").replace("#", "/").split("/")}:
            if len(piece) > 2:
                assert piece not in message.replace("percent-encoded", ""), piece


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:se@cret@h:0", "redis://:***@h:0"),
        ("redis+cluster://admin:a@b@10.0.0.1:bad", "redis+cluster://admin:***@10.0.0.1:bad"),
        ("redis+sentinel://u:x@y@h:2x/svc", "redis+sentinel://u:***@h:2x/svc"),
        ("redis://secret@h:0", "redis://***@h:0"),
    ],
)
def test_a_password_with_an_at_sign_is_hidden_up_to_the_last_at(url: str, shown: str) -> None:
    """What stands between // and the last @ is ***, the user kept; the real fault is named."""
    with pytest.raises(ConfigurationError, match="port") as caught:
        RedisStore.from_url(url)
    assert repr(shown) in str(caught.value)


def test_a_url_without_a_scheme_separator_does_not_echo_its_password() -> None:
    """redis:/u:hunter2@h is no URL; the refusal still hides the password."""
    with pytest.raises(ConfigurationError, match="must look like") as caught:
        RedisStore.from_url("redis:/u:hunter2@h")
    assert "hunter2" not in str(caught.value)

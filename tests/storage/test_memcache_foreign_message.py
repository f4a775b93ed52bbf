"""A memcached value ratewarden did not write: the message names the prefix option of both the
Python store (``prefix=``) and ``ratewarden serve`` (``--key-prefix``)."""

from __future__ import annotations

import pytest

from ratewarden.errors import StorageError
from ratewarden.storage._memcache_items import decode, item_of


def test_a_foreign_value_names_the_prefix_option_of_the_store_and_of_serve() -> None:
    """A library user reads prefix=, a serve user --key-prefix."""
    with pytest.raises(StorageError, match="did not write") as caught:
        decode(item_of(["rw:{k}:gcra:5:1:5"]), b"hello")
    assert "prefix= of the store" in str(caught.value)
    assert "--key-prefix of ratewarden serve" in str(caught.value)

"""The idempotency stores live in ratewarden.storage.idempotency; the old import still works."""

from __future__ import annotations

import re

import pytest

import ratewarden.idempotency
from ratewarden.middleware import idempotency as middleware
from ratewarden.storage import idempotency as stores

MOVED = [
    "AsyncMemoryIdempotencyStore",
    "AsyncRedisIdempotencyStore",
    "MemoryIdempotencyStore",
    "RedisIdempotencyStore",
]


@pytest.mark.parametrize("name", MOVED)
def test_a_store_from_the_middleware_module_warns_and_is_the_storage_class(name: str) -> None:
    """ratewarden.middleware.idempotency.<Store> warns, naming the new import, and returns
    the very class ratewarden.storage.idempotency holds."""
    message = re.escape(
        f"ratewarden.middleware.idempotency.{name} is deprecated; "
        f"import {name} from ratewarden.storage.idempotency"
    )
    with pytest.warns(DeprecationWarning, match=message):
        found = getattr(middleware, name)
    assert found is getattr(stores, name)


def test_from_import_of_a_moved_store_warns_too() -> None:
    """The form users wrote, ``from ratewarden.middleware.idempotency import ...``, warns."""
    with pytest.warns(DeprecationWarning, match="ratewarden.storage.idempotency"):
        from ratewarden.middleware.idempotency import MemoryIdempotencyStore
    assert MemoryIdempotencyStore is stores.MemoryIdempotencyStore


def test_the_records_and_protocols_are_one_set_of_classes_and_do_not_warn(
    recwarn: pytest.WarningsRecorder,
) -> None:
    """Claim, StoredResponse and the protocols stay importable from the middleware without a
    warning (its signatures use them), and are the classes ratewarden.idempotency defines."""
    for name in ("AsyncIdempotencyStore", "Claim", "IdempotencyStore", "StoredResponse"):
        assert getattr(middleware, name) is getattr(ratewarden.idempotency, name)
    assert [w for w in recwarn if issubclass(w.category, DeprecationWarning)] == []


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    """A name the middleware module never had raises AttributeError, not a warning."""
    message = r"module 'ratewarden\.middleware\.idempotency' has no attribute 'nope'"
    with pytest.raises(AttributeError, match=message):
        middleware.nope  # noqa: B018

"""The idempotency middlewares' options, checked when they are built: the seconds, byte
counts, ``required`` patterns and documentation URL (for ``IdempotencyPolicy``), the store
and the ``identity`` callback (for the middlewares). Each mistake is a ``ConfigurationError``
naming the option and the value."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from ratewarden.checks import is_number, refuse_class
from ratewarden.errors import ConfigurationError
from ratewarden.middleware._rules import compile_path

__all__ = [
    "MAX_SECONDS",
    "check_bytes",
    "check_identity",
    "check_required",
    "check_required_docs",
    "check_seconds",
    "check_store",
]

#: The longest ``lock_ttl`` or ``ttl`` taken (about 31 years): a longer one overflows Redis's
#: ``PX`` (milliseconds added to the server's clock), so every request would fail.
MAX_SECONDS = 1_000_000_000


def check_seconds(name: str, value: object) -> float:
    if not is_number(value, low_ok=False) or value > MAX_SECONDS:
        raise ConfigurationError(
            f"idempotency middleware {name}={value!r}: seconds, more than 0 and at most "
            f"{MAX_SECONDS:,} (about 31 years)"
        )
    return float(value)


def check_bytes(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"idempotency middleware {name}={value!r}: a byte count >= 0")
    return value


def check_required(value: object) -> bool | tuple[re.Pattern[str], ...]:
    """``required``: True or False, or path patterns (one or several) where a key is required."""
    if isinstance(value, bool):
        return value
    what = f"idempotency middleware required={value!r}"
    patterns = [value] if isinstance(value, str | re.Pattern) else value
    if not isinstance(patterns, Iterable) or isinstance(patterns, bytes | dict):
        raise ConfigurationError(
            f"{what}: True, False, or path patterns (such as '/payments/**') where a key"
            " is required"
        )
    compiled = []
    for pattern in patterns:
        if isinstance(pattern, re.Pattern) and isinstance(pattern.pattern, str):
            compiled.append(pattern)
        elif isinstance(pattern, str) and pattern.startswith("/"):
            compiled.append(compile_path(pattern, what))
        else:
            raise ConfigurationError(
                f"{what}: {pattern!r} is not a path pattern (a string starting with '/', "
                "or a compiled regular expression of str)"
            )
    if not compiled:
        raise ConfigurationError(f"{what}: no path pattern; required=False requires no key")
    return tuple(compiled)


def check_required_docs(value: object, required: object) -> str | None:
    """``required_docs``: None, or the absolute URL of the documentation of keys."""
    if value is None:
        return None
    what = f"idempotency middleware required_docs={value!r}"
    if not isinstance(value, str) or not urlsplit(value).scheme or any(c.isspace() for c in value):
        raise ConfigurationError(f"{what}: an absolute URL, such as 'https://example.com/docs'")
    if required is False:
        raise ConfigurationError(f"{what}: only a missing key's 400 links it; set required= too")
    return value


def check_store(store: object, want_async: bool, who: str) -> None:
    """``store`` has ``begin`` of the kind the middleware awaits (or calls)."""
    refuse_class(who, "store", store, needs="begin", kind="idempotency store")
    begin = getattr(store, "begin", None)
    if begin is None or inspect.iscoroutinefunction(begin) != want_async:
        kind = "an async store (AsyncMemoryIdempotencyStore, AsyncRedisIdempotencyStore)"
        if not want_async:
            kind = "a sync store (MemoryIdempotencyStore, RedisIdempotencyStore)"
        raise ConfigurationError(f"{who} needs {kind}, got {store!r}")


def check_identity(identity: object, want_async: bool, who: str) -> None:
    """``identity`` is None or a plain callable (of the ASGI scope, or of the WSGI environ):
    the middleware calls it and does not await, on ASGI too."""
    of = "scope" if want_async else "environ"
    if identity is not None and not callable(identity):
        raise ConfigurationError(
            f"{who} identity={identity!r}: a callable of the {of} naming the caller, or None"
        )
    call = type(identity).__call__  # an object's async __call__ too
    if inspect.iscoroutinefunction(identity) or inspect.iscoroutinefunction(call):
        raise ConfigurationError(
            f"{who} identity={identity!r:.80} is an async function: the middleware calls it "
            f"without awaiting; give a plain function of the {of} (what it needs, such as "
            "what an authentication middleware outside this one put there, is in it already)"
        )

"""What a key extractor may be, and what it and ``by_user``'s callback may return.

An identity is a string. Mistakes that Python would only report per request,
as a ``TypeError`` deep in the middleware, and only for some requests (a
signed-in user's id is an int, an anonymous one's None), are refused by name:

- at ``Rule(...)``: a factory given uncalled (``key=by_client_ip``), or a
  function that is not an extractor (``key=django_user``, which returns the
  user's primary key: ``key=by_user(django_user)``);
- per request: an extractor that returns something else than a string or None,
  and a ``by_user`` callback's user object whose ``str`` is the default
  ``<... object at 0x...>`` (a new identity per request: never limited).
"""

from __future__ import annotations

from ratewarden.errors import ConfigurationError

__all__ = ["check_key", "key_returned", "not_a_key", "user_text"]

# id of the object -> (the object, kept so the id stays its own; what to give instead).
_NOT_KEYS: dict[int, tuple[object, str]] = {}


def not_a_key(thing: object, instead: str) -> None:
    """Mark ``thing`` as refused by ``check_key``; ``instead`` says what to give."""
    _NOT_KEYS[id(thing)] = (thing, instead)


def check_key(key: object, where: str) -> None:
    """Refuse, naming ``where``, a ``key`` marked by ``not_a_key``."""
    entry = _NOT_KEYS.get(id(key))
    if entry is not None and entry[0] is key:
        name = getattr(key, "__name__", repr(key))
        raise ConfigurationError(f"{where}: key={name} is not a key extractor: {entry[1]}")


def key_returned(where: str, found: object) -> ConfigurationError:
    """The refusal of an extractor that returned ``found``, not a string or None."""
    return ConfigurationError(
        f"{where}: its key extractor returned {found!r} (type {type(found).__name__}), not a "
        "str or None: an identity is a string; to count users by an id, wrap the callback in "
        "by_user(...) (identities 'user:<id>')"
    )


def user_text(user: object) -> str | None:
    """The text of the user a ``by_user`` callback returned; None when there is none.

    None and "" are anonymous, and so is an object whose ``is_authenticated`` is false
    (Django's ``AnonymousUser``, Starlette's ``UnauthenticatedUser``). A str is taken as
    it is, an int as its digits, any other object as its ``str``, which must be its own.
    """
    if user is None or isinstance(user, str):
        return user or None
    if isinstance(user, bool):
        raise ConfigurationError(
            f"by_user: the callback returned {user!r}: return the user's id (a str or int), "
            "or None for an anonymous request"
        )
    if isinstance(user, int):
        return str(user)
    if not getattr(user, "is_authenticated", True):
        return None
    kind = type(user)
    if kind.__str__ is object.__str__ and kind.__repr__ is object.__repr__:
        raise ConfigurationError(
            f"by_user: the callback returned a {kind.__module__}.{kind.__qualname__}, whose "
            "str is its address in memory (a new identity per request: never limited): "
            "return the user's id, a str or int (Starlette: user.identity; Django: user.pk), "
            "or None for an anonymous request"
        )
    return str(user) or None

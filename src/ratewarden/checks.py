"""Input checks shared by every layer: keys, costs, rates, slot requests, names, ids, yes/no
options, and the keywords a constructor takes.

Each raises ``ConfigurationError`` naming the offending value and what to do,
before anything is consumed, and returns the value checked (the rates as a tuple).
A leaf: it imports only ``rate``, ``errors`` and ``deprecation`` (for ``UNSET``).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import re
from collections.abc import Callable, Collection, Sequence
from typing import Any, NoReturn, ParamSpec, TypeGuard, TypeVar

from ratewarden.deprecation import UNSET
from ratewarden.errors import ConfigurationError, shown
from ratewarden.rate import Rate

__all__ = [
    "MAX_LEASE_SECONDS",
    "MAX_SLOTS",
    "check_bool",
    "check_cost",
    "check_id",
    "check_key",
    "check_lease_id",
    "check_local",
    "check_name",
    "check_rates",
    "check_slot_count",
    "check_slot_request",
    "named_for",
    "is_number",
    "init_checked",
    "keywords_checked",
    "refuse_class",
    "refuse_unknown",
]

P = ParamSpec("P")
T = TypeVar("T")
C = TypeVar("C", bound=type)

_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}\Z")
_NAME_RULE = (
    "{what} name {value} must be 1-32 lowercase letters, digits or '_', "
    "starting with a letter (e.g. 'tokens', 'input_tokens')"
)
_ID_RULE = (
    "{what} {value} must be 1-128 characters from A-Z a-z 0-9 _ . : - "
    "(leave it out to get a random one)"
)


def is_number(value: object, low: float = 0.0, *, low_ok: bool = True) -> TypeGuard[int | float]:
    """Whether ``value`` is a finite ``int`` or ``float`` (a bool is not a number here) of at
    least ``low``, or above it with ``low_ok=False``: the test behind every "a number of
    seconds" option; each caller raises its own error, naming its option. An int too large
    for a float is not a number here either: every caller goes on to ``float(value)``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        number = float(value)
    except OverflowError:
        return False
    return math.isfinite(number) and (number >= low if low_ok else number > low)


def check_bool(what: str, value: object) -> bool:
    """A yes/no option: ``True`` or ``False`` only. Any other value (``"false"``, ``"no"``,
    ``0``, ``None``) is refused rather than read by its truth, which would take the string
    ``"false"`` for yes. ``what`` names the option, e.g. ``"rule 'strict' shadow"``."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"{what} {shown(value)} must be True or False")
    return value


def check_key(key: object) -> str:
    if not isinstance(key, str):
        raise ConfigurationError(f"key {shown(key)} must be a string")
    if not key:
        raise ConfigurationError("key must not be empty: pass the identity being limited")
    if not key.isascii():  # O(1) in CPython: only non-ASCII keys pay for the encode below
        try:
            key.encode()
        except UnicodeEncodeError as exc:
            raise ConfigurationError(
                f"key {shown(key)} is not valid text: {exc.reason} at index {exc.start} (a lone "
                "surrogate cannot be encoded as UTF-8 for any store); decode the bytes it came "
                "from with errors='replace' or 'backslashreplace'"
            ) from None
    return key


def check_cost(cost: object) -> int:
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise ConfigurationError(
            f"cost {shown(cost)} must be a whole number (0 checks without consuming)"
        )
    if cost < 0:
        raise ConfigurationError(f"cost {shown(cost)} must not be negative")
    return cost


def check_rates(rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]:
    if isinstance(rates, Rate):
        found: tuple[Rate, ...] = (rates,)
    elif isinstance(rates, list | tuple):
        found = tuple(rates)
    elif isinstance(rates, str):  # the text the middleware's Rule takes: say how to parse it
        raise ConfigurationError(
            f"rates {shown(rates)} must be a Rate or a list of Rates, not text: "
            f"Rate.parse({shown(rates)})"
        )
    else:
        raise ConfigurationError(f"rates {shown(rates)} must be a Rate or a list of Rates")
    if not found:
        raise ConfigurationError("no rate given: pass a Rate or a list of Rates")
    for rate in found:
        if not isinstance(rate, Rate):
            example = shown(rate if isinstance(rate, str) else "100/minute")
            raise ConfigurationError(f"{shown(rate)} is not a Rate; use Rate.parse({example})")
    if len(set(found)) != len(found):
        raise ConfigurationError(f"rates {[str(r) for r in found]} list the same rate twice")
    return found


def check_local(owner: str, local: T) -> T:
    """``local`` when it is of a kind ``local=`` takes (a number, a Rate, a list or tuple,
    None), else ``ConfigurationError`` naming ``owner``, the value and its type; the
    fraction's range and the list's items are checked where the rates are made."""
    if local is None or isinstance(local, Rate | list | tuple):
        return local
    if not isinstance(local, bool) and isinstance(local, int | float):
        return local
    name = type(local).__name__
    hint = ""
    if isinstance(local, str):
        try:
            hint = f"; write local={float(local)!r}, a number, not the string {local!r}"
        except ValueError:
            try:
                Rate.parse(local)
                hint = f"; write local=Rate.parse({local!r})"
            except ValueError:
                pass
    raise ConfigurationError(
        f"{owner}: local {local!r:.60} ({'an' if name[:1] in 'aeiou' else 'a'} {name}) must "
        "be a fraction of each rate per process, above 0 and at most 1 (local=0.25), a Rate, "
        f"a list of Rates, or None (no local bucket){hint}"
    )


#: The most slots a concurrency limit, or one lease, may count. A key's slots in use never
#: pass its limit, so every sum the stores take (slots held plus slots asked) stays at most
#: 2**53, exact in a Redis number as every Rate's state is.
MAX_SLOTS = 2**52
#: The longest slot lease, in seconds: a year of 365 days (as a budget's longest time).
MAX_LEASE_SECONDS = 365 * 86_400


def check_slot_count(what: str, value: object) -> int:
    """A concurrency ``limit`` or ``slots`` (``what``): a whole number from 1 to ``MAX_SLOTS``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"concurrency {what} {shown(value)} must be a whole number >= 1")
    if value > MAX_SLOTS:
        raise ConfigurationError(
            f"concurrency {what} {_amount(value)} is too large: at most {MAX_SLOTS:,} (2**52), "
            "past which a Redis number does not count slots exactly"
        )
    return value


def check_slot_request(limit: object, slots: object, ttl_us: object, lease_id: object) -> None:
    """What a store's slot call takes: ``limit`` and ``slots`` (``check_slot_count``), a lease
    ttl of 1 microsecond to ``MAX_LEASE_SECONDS``, and a lease id."""
    check_slot_count("limit", limit)
    check_slot_count("slots", slots)
    if isinstance(ttl_us, bool) or not isinstance(ttl_us, int) or ttl_us < 1:
        raise ConfigurationError(
            f"concurrency ttl {shown(ttl_us)} must be a whole number of microseconds >= 1"
        )
    if ttl_us > MAX_LEASE_SECONDS * 1_000_000:
        raise ConfigurationError(
            f"concurrency ttl {_amount(ttl_us)} microseconds is too long: at most "
            f"{MAX_LEASE_SECONDS:,} seconds (365 days)"
        )
    check_lease_id(lease_id)


def _amount(number: int) -> str:
    """A large whole number for an error: ``4,503,599,627,370,497``, or ``shown``'s words
    when it is too long to write out."""
    return f"{number:,}" if number.bit_length() <= 200 else shown(number)


def check_lease_id(lease_id: object) -> str:
    if not isinstance(lease_id, str) or not lease_id:
        raise ConfigurationError(f"lease id {shown(lease_id)} must be a non-empty string")
    return lease_id


def check_name(what: str, name: object) -> str:
    """An axis (or similar) name: lowercase letters, digits and ``_``, starting with a letter."""
    return _matched(_NAME, name, what, _NAME_RULE)


def check_id(what: str, value: object) -> str:
    """A reservation (or similar) id: 1-128 of ``A-Z a-z 0-9 _ . : -``."""
    return _matched(_ID, value, what, _ID_RULE)


def _matched(pattern: re.Pattern[str], value: object, what: str, message: str) -> str:
    """``value`` when it is a string ``pattern`` matches, else ``message`` (formatted with
    ``what`` and ``value``, as ``shown``, only then) as a ConfigurationError."""
    if not isinstance(value, str) or not pattern.match(value):
        raise ConfigurationError(message.format(what=what, value=shown(value)))
    return value


def refuse_class(owner: str, what: str, given: object, *, needs: str, kind: str = "store") -> None:
    """Refuse a class given where an instance goes (``Limiter(RedisStore)``: the ``()`` or the
    ``.from_url(url)`` forgotten). A class has its instances' methods, so a check for ``needs``
    (``hit``, ``begin``, ...) took it, and it failed later: an AttributeError on its ``clock``,
    or a message blaming a clock never given (on the class, ``clock`` is a property object)."""
    if not isinstance(given, type):
        return
    name = given.__name__
    found = f"{owner}: {what} is the class {name}, not {_article(kind)} {kind}"
    if not callable(getattr(given, needs, None)):
        raise ConfigurationError(f"{found} (it has no {needs}); pass {_article(kind)} {kind}")
    raise ConfigurationError(f"{found}; pass {_built(given)}, an instance, not the class")


def _article(noun: str) -> str:
    return "an" if noun[:1] in "aeiouAEIOU" else "a"


def _built(cls: type) -> str:
    """How an instance of ``cls`` is made: ``RedisStore.from_url(url)``, ``MemoryStore()``, or
    ``AsyncSplitStore(...)`` when it takes arguments."""
    name = cls.__name__
    if callable(getattr(cls, "from_url", None)):
        return f"{name}.from_url(url)"
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # no signature to read
        return f"{name}(...)"
    optional = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    bare = all(p.default is not p.empty or p.kind in optional for p in parameters)
    return f"{name}()" if bare else f"{name}(...)"


def refuse_unknown(
    owner: str,
    given: Collection[str],
    takes: Sequence[str],
    what: str = "keyword",
    *,
    old: Collection[str] = (),
) -> None:
    """``ConfigurationError`` naming ``owner`` (the public class), the ``given`` names it does
    not take, the nearest name it takes when one is close, and every name it takes; nothing
    when each is one of ``takes`` or ``old``. ``old`` are deprecated names (``failure``, now
    ``failure_mode``): still taken, but neither offered nor called unknown."""
    unknown = sorted(set(given) - set(takes) - set(old))
    if not unknown:
        return
    plural = "s" if len(unknown) > 1 else ""
    close = [found for name in unknown for found in difflib.get_close_matches(name, takes, 1)]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigurationError(
        f"{owner}: unknown {what}{plural} {', '.join(map(repr, unknown))}; "
        f"it takes {', '.join(takes)}{hint}"
    )


def keywords_checked(init: Callable[P, None]) -> Callable[P, None]:
    """``init``, a base class's ``__init__``, refusing a keyword it does not take, or too many
    positional arguments, with a ``ConfigurationError`` naming the class being built (the
    public one): Python's own TypeError would name the private base that defines ``init``
    (``DecisionCore.__init__() got an unexpected keyword argument 'algoritm'``)."""
    params = list(inspect.signature(init).parameters.values())[1:]  # less self
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    known = frozenset(p.name for p in params if p.kind in kinds)
    # A renamed keyword's old name (its default UNSET) is still taken, but not offered.
    takes = tuple(p.name for p in params if p.kind in kinds and p.default is not UNSET)
    old = known.difference(takes)
    positional = tuple(p.name for p in params if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD)
    by_keyword = tuple(name for name in takes if name not in positional)

    @functools.wraps(init)
    def checked(*args: P.args, **kwargs: P.kwargs) -> None:
        if not known.issuperset(kwargs):
            refuse_unknown(type(args[0]).__name__, kwargs, takes, old=old)
        if len(args) > len(positional) + 1:
            _refuse_positional(type(args[0]).__name__, len(args) - 1, positional, by_keyword)
        try:
            init(*args, **kwargs)
        except TypeError as exc:
            renamed = named_for(exc, init, f"{type(args[0]).__name__}()")
            if renamed is None:
                raise
            raise renamed from None

    return checked


def named_for(error: TypeError, function: Callable[..., Any], public: str) -> TypeError | None:
    """Python's TypeError for a missing argument of ``function`` (``_BudgetBase.__init__()
    missing 1 required positional argument: 'store'``) naming ``public`` instead
    (``TokenBudget()``), or None when ``error`` is not that one (raised inside, say)."""
    message = str(error)
    private = f"{function.__qualname__}() missing "
    if not message.startswith(private):
        return None
    return TypeError(f"{public} missing {message.removeprefix(private)}")


def init_checked(cls: C) -> C:
    """``cls`` with the ``__init__`` a dataclass made for it under ``keywords_checked``; put
    it above ``@dataclass``, which writes ``__init__`` (and, with slots, a new class)."""
    type.__setattr__(cls, "__init__", keywords_checked(cls.__dict__["__init__"]))
    return cls


def _refuse_positional(
    owner: str, given: int, positional: Sequence[str], by_keyword: Sequence[str]
) -> NoReturn:
    """``owner`` was given ``given`` positional arguments, more than its ``positional``
    parameters take: say so, and name what it takes by keyword (``by_keyword``), if any."""
    count = f"{given} positional argument{'s' if given > 1 else ''} given"
    if positional:
        takes = f"at most {len(positional)} ({', '.join(positional)})"
        rest = "; give the rest by keyword" if by_keyword else ""
    else:
        takes = "none"
        rest = f"; give its options by keyword ({', '.join(by_keyword)})" if by_keyword else ""
    raise ConfigurationError(f"{owner}: {count}, but it takes {takes}{rest}")

"""``Rule``: which requests a limit applies to, under which key, at what cost.

A rule selects requests by path pattern and method, names the identity it
counts (a key extractor), applies one or more rates (checked and consumed all
or nothing on that identity) and charges each request a cost: a number, a
price per method (``{"GET": 1, "POST": 5}``, the way GitHub prices reads and
writes) or a callable.

Path patterns: ``*`` matches within one path segment, ``**`` across segments,
``{name}`` one non-empty segment; anything else is literal. A compiled
``re.Pattern`` is used as is (``fullmatch``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ratewarden.checks import check_bool, keywords_checked
from ratewarden.errors import ConfigurationError
from ratewarden.middleware._denied import DeniedHook, check_denied
from ratewarden.middleware._identity import ANONYMOUS, KeyFunc, by_client_ip
from ratewarden.middleware._key_checks import check_key, key_returned
from ratewarden.middleware._request import RequestInfo
from ratewarden.rate import Rate

__all__ = [
    "CostFunc",
    "FixedCost",
    "Rule",
    "Selection",
    "compile_path",
    "compile_paths",
    "method_set",
    "parse_rates",
    "selects",
]

#: The cost of one request, computed from it.
CostFunc = Callable[[RequestInfo], int]

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_TOKEN = re.compile(r"\*\*|\*|\{[A-Za-z_][A-Za-z0-9_]*\}")


def check_name(name: object) -> str:
    """A rule name: 1-64 letters, digits, ``_``, ``.``, ``-`` (it appears in keys and headers)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"rule name {name!r} must be 1-64 letters, digits, '_', '.' or '-'"
        )
    return name


def parse_rates(rates: object, where: str) -> tuple[Rate, ...]:
    """``"10/second; 1000/hour"``, a Rate, or a list of either, as a tuple of Rates."""
    if isinstance(rates, Rate):
        return (rates,)
    if isinstance(rates, str):
        return Rate.parse_many(rates)
    if isinstance(rates, Iterable):
        found = tuple(r if isinstance(r, Rate) else Rate.parse(r) for r in rates)
        if found:
            return found
    raise ConfigurationError(f"{where}: rates {rates!r} must be a Rate, a string or a list of them")


def compile_path(pattern: str | re.Pattern[str], where: str = "") -> re.Pattern[str]:
    """A path pattern as a regular expression matched against the whole path; ``where``
    (``"rule 'orders'"``) begins the message of a ``ConfigurationError``."""
    if isinstance(pattern, re.Pattern):
        return pattern
    at = f"{where}: " if where else ""
    if not isinstance(pattern, str) or not pattern.startswith("/"):
        raise ConfigurationError(f"{at}path pattern {pattern!r} must be a string starting with '/'")
    literals, parts, last = [], [], 0
    for token in _TOKEN.finditer(pattern):
        literals.append(pattern[last : token.start()])
        parts.append(re.escape(literals[-1]))
        text = token.group()
        parts.append(".*" if text == "**" else "[^/]*" if text == "*" else "[^/]+")
        last = token.end()
    literals.append(pattern[last:])
    parts.append(re.escape(literals[-1]))
    if any("{" in text or "}" in text for text in literals):
        # A literal brace is almost always a {name} mistyped: it would match no request.
        raise ConfigurationError(
            f"{at}path pattern {pattern!r} has a '{{' or '}}' that does not enclose a name: write"
            " {name} for one segment (a letter or '_', then letters, digits or '_'), or give a"
            " compiled re.Pattern to match a literal brace"
        )
    return re.compile("".join(parts))


def compile_paths(
    paths: Iterable[str | re.Pattern[str]] | str | re.Pattern[str] | None,
    where: str = "",
) -> tuple[re.Pattern[str], ...] | None:
    """Path patterns (one, or several) compiled; None selects every path."""
    if paths is None:
        return None
    if isinstance(paths, str | re.Pattern):
        paths = [paths]
    return tuple(compile_path(p, where) for p in paths)


#: An HTTP method name: a token (RFC 9110, section 5.6.2).
_METHOD = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def method_set(methods: object, where: str) -> frozenset[str] | None:
    """Method names (one, or several), upper-case; None selects every method.

    Raises ``ConfigurationError`` naming ``where`` for anything else: a name that is
    not an HTTP token (``"GET POST"`` would never match a request), or none at all.
    """
    if methods is None:
        return None
    if isinstance(methods, str):
        methods = [methods]
    if not isinstance(methods, Iterable):
        raise ConfigurationError(f"{where} methods={methods!r}: a method name or several")
    names = []
    for method in methods:
        check_method(method, f"{where} methods")
        names.append(method.upper())
    if not names:
        raise ConfigurationError(
            f"{where} methods=[]: selects no request; leave it out (None) for every method"
        )
    return frozenset(names)


#: RFC 9110's methods and PATCH: a name close to one of these (``GETS``) is a typo.
_STANDARD = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
#: Extension methods in use (IANA's registry, caches' and UPnP's), taken as they are.
# fmt: off
_EXTENSIONS = frozenset({
    "ACL", "BAN", "BASELINE-CONTROL", "BIND", "CHECKIN", "CHECKOUT", "COPY", "LABEL", "LINK",
    "LOCK", "M-SEARCH", "MERGE", "MKACTIVITY", "MKCALENDAR", "MKCOL", "MKREDIRECTREF",
    "MKWORKSPACE", "MOVE", "NOTIFY", "ORDERPATCH", "PRI", "PROPFIND", "PROPPATCH", "PURGE",
    "QUERY", "REBIND", "REPORT", "SEARCH", "SUBSCRIBE", "UNBIND", "UNCHECKOUT", "UNLINK",
    "UNLOCK", "UNSUBSCRIBE", "UPDATE", "UPDATEREDIRECTREF", "VERSION-CONTROL",
})
# fmt: on


def check_method(method: object, where: str) -> str:
    """``method`` when it is an HTTP method name; else ``ConfigurationError`` naming ``where``.

    Any token is a method (extensions such as ``PURGE``), but one that is not a method in
    use and is close to a standard one (``GETS``, ``PSOT``) is a typo that would select
    nothing: refused with the one it is close to.
    """
    if not isinstance(method, str) or not _METHOD.fullmatch(method):
        raise ConfigurationError(
            f"{where}: {method!r} is not a method name (an HTTP token, such as GET)"
        )
    upper = method.upper()
    if upper not in _STANDARD and upper not in _EXTENSIONS:
        close = difflib.get_close_matches(upper, _STANDARD, 1, cutoff=0.75) or [
            name for name in _STANDARD if _one_slip(upper, name)
        ]
        if close:
            raise ConfigurationError(
                f"{where}: {method!r} is not a method in use (a typo would select no "
                f"request); did you mean {close[0]}?"
            )
    return method


def _one_slip(typed: str, name: str) -> bool:
    """Whether ``typed`` is ``name`` with one slip of the fingers: two neighbouring letters
    swapped (``GTE``), or one letter added or dropped (``GETT``, ``PST``). difflib's ratio
    misses a swap in a three-letter name (``GTE`` scores 0.67 against ``GET``). One letter
    changed is left to difflib: in three letters (``SET``) it may be a method of its own."""
    if typed == name or abs(len(typed) - len(name)) > 1:
        return False
    if len(typed) == len(name):
        differ = [i for i, (a, b) in enumerate(zip(typed, name, strict=True)) if a != b]
        if len(differ) != 2 or differ[1] != differ[0] + 1:
            return False
        i = differ[0]
        return typed[i] == name[i + 1] and typed[i + 1] == name[i]
    shorter, longer = sorted((typed, name), key=len)
    return any(longer[:i] + longer[i + 1 :] == shorter for i in range(len(longer)))


def selects(
    paths: tuple[re.Pattern[str], ...] | None,
    methods: frozenset[str] | None,
    request: RequestInfo,
) -> bool:
    """True when ``request``'s method and path are among ``methods`` and ``paths`` (None: any).

    GET selects HEAD too: the frameworks route a HEAD to the GET view, which then runs.
    """
    if methods is not None:
        method = request.method
        if method not in methods and (method != "HEAD" or "GET" not in methods):
            return False
    return paths is None or any(p.fullmatch(request.path) for p in paths)


class Selection:
    """Which requests a middleware takes and whose they are: the part of a ``Rule`` the
    concurrency and token budget middlewares share (``paths``, ``methods``, ``key``,
    ``fallback``), checked with ``who`` naming the middleware in errors."""

    __slots__ = ("fallback", "key", "methods", "paths", "who")

    def __init__(
        self,
        who: str,
        *,
        key: KeyFunc | None,
        fallback: str,
        paths: Iterable[str | re.Pattern[str]] | str | None,
        methods: Iterable[str] | str | None,
    ) -> None:
        if key is not None and not callable(key):
            raise ConfigurationError(f"{who} key={key!r}: a key extractor")
        check_key(key, who)
        if not isinstance(fallback, str) or not fallback:
            raise ConfigurationError(f"{who} fallback={fallback!r}: a non-empty string")
        self.who = who
        self.key: KeyFunc = key if key is not None else by_client_ip()
        self.fallback = fallback
        self.paths = compile_paths(paths, who)
        self.methods = method_set(methods, who)

    def matches(self, request: RequestInfo) -> bool:
        """True when the request's method and path are selected."""
        return selects(self.paths, self.methods, request)

    def identity(self, request: RequestInfo) -> str:
        """The request's identity, ``fallback`` when it has none (never "unlimited")."""
        found = self.key(request) or self.fallback
        if not isinstance(found, str):
            raise key_returned(self.who, found)
        return found


def _method_costs(costs: Mapping[str, int], where: str) -> CostFunc:
    table = {
        (method if method == "*" else check_method(method, f"{where} cost")).upper(): _check_cost(
            cost, where
        )
        for method, cost in costs.items()
    }
    default = table.pop("*", 1)
    if "GET" in table:  # a HEAD runs the GET view: it costs what GET does unless priced itself
        table.setdefault("HEAD", table["GET"])

    def cost_of(request: RequestInfo) -> int:
        return table.get(request.method, default)

    return cost_of


def _check_cost(cost: object, where: str) -> int:
    if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
        raise ConfigurationError(f"{where}: cost {cost!r} must be a whole number >= 0")
    return cost


def _cost_func(cost: int | Mapping[str, int] | CostFunc, where: str) -> CostFunc:
    if isinstance(cost, Mapping):
        return _method_costs(cost, where)
    if callable(cost):
        user = cost

        def checked(request: RequestInfo) -> int:
            return _check_cost(user(request), f"{where} (cost callable)")

        return checked
    return FixedCost(_check_cost(cost, where))


class FixedCost:
    """A cost that does not depend on the request; the core reads ``value`` without a call."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value

    def __call__(self, request: RequestInfo) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"FixedCost({self.value})"


@dataclass(frozen=True, slots=True, init=False)
class Rule:
    """One limit on HTTP requests; see the module docstring.

    - ``name``: unique; names the policy in headers, the kill switch, the shadow
      report and the store key (``<name>:<identity>``).
    - ``rates``: ``"100/minute"``, ``"10/second; 1000/hour"``, a Rate or a list.
    - ``key``: the identity extractor; None uses the rule set's ``default_key``.
    - ``paths``: patterns; None matches every path. ``methods``: None matches all.
    - ``cost``: an int, a ``{method: cost}`` table (``"*"`` for the rest, else 1),
      or a callable of the request.
    - ``shadow``: evaluate and count, never block (see ``RuleSet.shadow_report``).
    - ``fallback``: the identity when ``key`` finds none.
    - ``denied``: what a request this rule denies gets, when not the default 429
      (a ``Denied``, or a callable of a ``Denial``; see ``_denied``).
    """

    name: str
    rates: tuple[Rate, ...]
    key: KeyFunc | None = field(repr=False)
    paths: tuple[re.Pattern[str], ...] | None
    methods: frozenset[str] | None
    cost: CostFunc = field(repr=False)
    shadow: bool
    fallback: str
    denied: DeniedHook | None = field(repr=False)

    @keywords_checked
    def __init__(
        self,
        name: str,
        rates: str | Rate | Sequence[str | Rate],
        *,
        key: KeyFunc | None = None,
        paths: Iterable[str | re.Pattern[str]] | str | None = None,
        methods: Iterable[str] | str | None = None,
        cost: int | Mapping[str, int] | CostFunc = 1,
        shadow: bool = False,
        fallback: str = ANONYMOUS,
        denied: DeniedHook | None = None,
    ) -> None:
        name = check_name(name)
        where = f"rule {name!r}"
        if key is not None and not callable(key):
            raise ConfigurationError(f"{where}: key {key!r} must be a key extractor (callable)")
        check_key(key, where)
        if not isinstance(fallback, str) or not fallback:
            raise ConfigurationError(f"{where}: fallback {fallback!r} must be a non-empty string")
        check_bool(f"{where}: shadow", shadow)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "rates", parse_rates(rates, where))
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "paths", compile_paths(paths, where))
        object.__setattr__(self, "methods", method_set(methods, where))
        object.__setattr__(self, "cost", _cost_func(cost, where))
        object.__setattr__(self, "shadow", shadow)
        object.__setattr__(self, "fallback", fallback)
        object.__setattr__(self, "denied", check_denied(denied, where))

    def matches(self, request: RequestInfo) -> bool:
        """True when the request's method and path are selected by this rule."""
        return selects(self.paths, self.methods, request)

    def with_changes(
        self,
        rates: str | Rate | Sequence[str | Rate] | None = None,
        cost: int | Mapping[str, int] | CostFunc | None = None,
    ) -> Rule:
        """A copy with other rates and/or cost (a per-route override)."""
        where = f"override of rule {self.name!r}"
        changed = self
        if rates is not None:
            changed = replace(changed, rates=parse_rates(rates, where))
        if cost is not None:
            changed = replace(changed, cost=_cost_func(cost, where))
        return changed

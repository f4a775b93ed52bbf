"""envoyproxy/ratelimit's stats over DogStatsD: upstream's names, its tags as tags, mogrifiers.

``DogStatsdSink`` counts what ``StatsdSink`` counts and sends it as DogStatsD lines
(``name:value|c|#tag:value,...``) over UDP or a Unix datagram socket, where
upstream's ``USE_DOG_STATSD`` sink writes the same stats with datadog-go. The tags
are, in order:

- Datadog's unified service tags from the environment, as datadog-go adds them:
  ``DD_ENTITY_ID`` (``dd.internal.entity_id``), ``DD_ENV`` (``env``), ``DD_SERVICE``
  (``service``), ``DD_VERSION`` (``version``);
- ``--statsd-tags`` (upstream's ``EXTRA_TAGS``), sorted by name, a value's ``.``,
  ``:`` and ``|`` replaced by ``_`` as upstream's stats library serializes them
  before its DogStatsD sink reads them back;
- the tags of the first mogrifier whose pattern the name matches.

A tag both ways (``DD_ENV=staging`` and ``--statsd-tags env:prod``) is sent twice,
``#env:staging,env:prod``, as datadog-go (and Datadog's Python client) send it: neither
drops one, so upstream sends it twice too. ``statsd_sinks`` warns at start
(``dogstatsd_tags_twice``), since a Datadog facet then shows both values.

A ``Mogrifier`` (upstream's ``DOG_STATSD_MOGRIFIER_<N>_*``) rewrites a stat's name
and adds tags: its ``pattern`` is searched for in the name (unanchored, as Go's
``FindStringSubmatch``), and ``$0``, ``$1``... in its ``name`` and tag values are
the match and its groups (an unmatched group is empty; a number past the last
group stays as written). The patterns are Python regular expressions: the
common RE2 patterns upstream's examples use read the same, and one Python
cannot read stops the start naming it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratewarden.errors import ConfigurationError
from ratewarden.server.parsers import yaml_file
from ratewarden.server.statsd import SERVER, TAG_VALUE, StatsdSink, parse_address

if TYPE_CHECKING:
    from ratewarden.server.settings import Settings

__all__ = [
    "DogStatsdSink",
    "Mogrifier",
    "datadog_tags",
    "load_mogrifiers",
    "mogrifiers_from_env",
    "parse_dogstatsd_address",
    "statsd_sinks",
]

log = logging.getLogger("ratewarden.server")

#: Datadog's environment variables that become tags on every stat, as datadog-go adds them.
DATADOG_TAGS = (
    ("DD_ENTITY_ID", "dd.internal.entity_id"),
    ("DD_ENV", "env"),
    ("DD_SERVICE", "service"),
    ("DD_VERSION", "version"),
)
#: Upstream's variables of mogrifier N: ``DOG_STATSD_MOGRIFIER_<N>_PATTERN`` and so on.
ENV_PREFIX = "DOG_STATSD_MOGRIFIER_"
_VARIABLE = re.compile(r"\$(\d+)")
#: Names mogrified, kept per sink (stat names repeat every interval); cleared when full.
_MAX_HEADS = 65_536


@dataclass(frozen=True, slots=True)
class Mogrifier:
    """A pattern a stat name is searched for, and the name and tags to send instead."""

    pattern: str
    name: str
    tags: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ConfigurationError(f"pattern {self.pattern!r} is not a regex: {exc}") from None
        if not self.pattern:
            raise ConfigurationError("has no pattern")
        if not self.name:
            raise ConfigurationError("has no name")
        for key, value in self.tags:
            if not key or not value:
                raise ConfigurationError(f"tag {key}:{value} needs a name and a value")

    def mogrify(self, name: str) -> tuple[str, list[str]] | None:
        """The name and tags to send for stat ``name``, or None when the pattern is not in it."""
        found = re.search(self.pattern, name)
        if found is None:
            return None
        groups = [found.group(0), *(group or "" for group in found.groups())]

        def fill(template: str) -> str:
            def one(variable: re.Match[str]) -> str:
                index = int(variable.group(1))
                return groups[index] if index < len(groups) else variable.group(0)

            return _VARIABLE.sub(one, template)

        return fill(self.name), [f"{key}:{fill(value)}" for key, value in self.tags]


def parse_dogstatsd_address(value: Any) -> str:
    """A DogStatsD server, ``udp://HOST:PORT`` (``HOST:PORT`` alone is UDP, as datadog-go
    reads it) or ``unix:///PATH`` (a Unix datagram socket, the Datadog Agent's
    ``dogstatsd_socket``), written in one form; raises ``ConfigurationError``."""
    text = str(value).strip()
    if text.startswith("unix://"):
        path = text.removeprefix("unix://")
        if not path.startswith("/"):
            raise ConfigurationError("must be unix:///ABSOLUTE/PATH for a Unix socket")
        return "unix://" + path
    if "://" not in text:
        text = "udp://" + text
    protocol, host, port = parse_address(text)
    if protocol != "udp":
        raise ConfigurationError(f"scheme {protocol!r} is not udp or unix (DogStatsD is datagrams)")
    return f"udp://{f'[{host}]' if ':' in host else host}:{port}"


def _endpoint(address: str) -> tuple[str, str, int]:
    """``(protocol, host or path, port)`` of an address ``parse_dogstatsd_address`` wrote."""
    if address.startswith("unix://"):
        return "unix", address.removeprefix("unix://"), 0
    return parse_address(address)


def datadog_tags(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The ``tag:value`` datadog-go adds to every stat from ``DD_ENV`` and the others set."""
    return tuple(
        f"{tag}:{environ[name].strip()}"
        for name, tag in DATADOG_TAGS
        if environ.get(name, "").strip()
    )


def _mogrifier(where: str, pattern: Any, name: Any, given: Iterable[tuple[Any, Any]]) -> Mogrifier:
    tags = tuple(given)
    for field, value in (("pattern", pattern), ("name", name), *tags):
        if not isinstance(value, str):
            raise ConfigurationError(f"{where}: {field}'s value {value!r} must be text (quote it)")
    try:
        return Mogrifier(pattern, name, tuple((str(k).strip(), v.strip()) for k, v in tags))
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where} {exc}") from None


def load_mogrifiers(value: Any) -> tuple[Mogrifier, ...]:
    """The mogrifiers of a YAML file, a list of ``{pattern, name, tags: {TAG: VALUE}}`` tried
    in order (mogrifiers already read pass through); raises ``ConfigurationError``."""
    if isinstance(value, tuple):
        return value
    path = Path(str(value).strip())
    loaded = yaml_file(path)
    if not isinstance(loaded, list) or not loaded:
        raise ConfigurationError(f"{path} must hold a list of mogrifiers (pattern, name, tags)")
    out = []
    for index, item in enumerate(loaded, 1):
        where = f"{path}, mogrifier {index}"
        if not isinstance(item, dict) or "pattern" not in item or "name" not in item:
            raise ConfigurationError(f"{where} must be a mapping with a pattern and a name")
        unknown = sorted(str(key) for key in set(item) - {"pattern", "name", "tags"})
        if unknown:
            raise ConfigurationError(f"{where} has unknown fields {unknown} (pattern, name, tags)")
        tags = item.get("tags") or {}
        if not isinstance(tags, dict):
            raise ConfigurationError(f"{where}: tags must be a mapping of TAG: VALUE")
        out.append(_mogrifier(where, item["pattern"], item["name"], tags.items()))
    return tuple(out)


def mogrifiers_from_env(names: str, environ: Mapping[str, str]) -> tuple[Mogrifier, ...]:
    """Upstream's ``USE_DOG_STATSD_MOGRIFIERS=A,B``: mogrifier A from
    ``DOG_STATSD_MOGRIFIER_A_PATTERN``, ``_NAME`` and ``_TAGS`` (``tag:$1,tag2:value``),
    then B; raises ``ConfigurationError`` naming the variable that is missing or wrong."""
    out = []
    for name in (part.strip().upper() for part in names.split(",")):
        if not name:
            continue
        prefix = f"{ENV_PREFIX}{name}_"
        pattern, label = (environ.get(prefix + field, "") for field in ("PATTERN", "NAME"))
        for field, value in (("PATTERN", pattern), ("NAME", label)):
            if not value:
                raise ConfigurationError(
                    f"USE_DOG_STATSD_MOGRIFIERS names {name} but {prefix}{field} is not set"
                )
        tags = []
        for item in environ.get(prefix + "TAGS", "").split(","):
            if not item.strip():
                continue
            key, colon, tag = item.partition(":")
            if not colon:
                raise ConfigurationError(f"{prefix}TAGS: {item.strip()!r} is not TAG:VALUE")
            tags.append((key, tag))
        out.append(_mogrifier(f"mogrifier {name} ({prefix}*)", pattern, label, tags))
    return tuple(out)


def statsd_sinks(settings: Settings, environ: Mapping[str, str]) -> list[StatsdSink]:
    """The sinks ``settings`` ask for: StatsD (``--statsd``) and DogStatsD (``--dogstatsd``,
    with Datadog's tags from ``environ``)."""
    sinks: list[StatsdSink] = []
    if settings.statsd is not None:
        protocol, host, port = parse_address(settings.statsd)
        sinks.append(StatsdSink(protocol, host, port, tags=settings.statsd_tags))
    if settings.dogstatsd is not None:
        global_tags = datadog_tags(environ)
        _warn_twice(global_tags, settings.statsd_tags)
        sinks.append(
            DogStatsdSink(
                settings.dogstatsd,
                tags=settings.statsd_tags,
                mogrifiers=settings.dogstatsd_mogrifiers,
                global_tags=global_tags,
            )
        )
    return sinks


def _warn_twice(global_tags: Iterable[str], tags: Iterable[tuple[str, str]]) -> None:
    """One warning for the tags that Datadog's variables and ``--statsd-tags`` both give:
    both are sent, as datadog-go sends them."""
    given = {name for name, _ in tags}
    twice = [tag for tag in global_tags if tag.partition(":")[0] in given]
    if twice:
        names = [tag.partition(":")[0] for tag in twice]
        log.warning(
            "DogStatsD tags given twice, by Datadog's variables (%s) and --statsd-tags: each "
            "line carries both values, as datadog-go sends them; give each tag once",
            ", ".join(twice),
            extra={"event": "dogstatsd_tags_twice", "tags": names},
        )


class DogStatsdSink(StatsdSink):
    """``StatsdSink``'s counts, sent as DogStatsD lines over UDP or a Unix datagram socket.

    ``address``: as ``parse_dogstatsd_address`` writes it; ``tags``: ``--statsd-tags``;
    ``global_tags``: ``datadog_tags(environ)``, first on every line.
    """

    def __init__(
        self,
        address: str,
        *,
        tags: Iterable[tuple[str, str]] = (),
        mogrifiers: Iterable[Mogrifier] = (),
        global_tags: Iterable[str] = (),
    ) -> None:
        protocol, host, port = _endpoint(address)
        if protocol not in ("udp", "unix"):
            raise ConfigurationError(f"DogStatsD address {address!r} is not udp:// or unix://")
        super().__init__(protocol, host, port)
        self.tags = (
            *global_tags,
            *(f"{name}:{tag.translate(TAG_VALUE)}" for name, tag in sorted(tags)),
        )
        self.mogrifiers = tuple(mogrifiers)
        self._heads: dict[str, tuple[str, str]] = {}

    def head(self, name: str) -> tuple[str, str]:
        """What a line of stat ``name`` starts and ends with: the (mogrified) name, and its
        tags as ``|#tag,tag`` (empty without tags); newlines dropped, as datadog-go drops
        them from tags."""
        found = self._heads.get(name)
        if found is not None:
            return found
        sent, tags = name, list(self.tags)
        for mogrifier in self.mogrifiers:
            mogrified = mogrifier.mogrify(name)
            if mogrified is not None:
                sent, extra = mogrified
                tags.extend(extra)
                break
        tail = "|#" + ",".join(tags) if tags else ""
        if len(self._heads) >= _MAX_HEADS:
            self._heads.clear()
        found = self._heads[name] = (_one_line(sent), _one_line(tail))
        return found

    def lines(self) -> list[bytes]:
        """Everything counted since the last call, as DogStatsD lines (and forget it)."""
        counters, self._counters = self._counters, {}
        timers, self._timers = self._timers, []
        out = []
        for name, value in counters.items():
            sent, tail = self.head(name)
            out.append(f"{sent}:{value}|c{tail}\n".encode())
        if timers:
            sent, tail = self.head(SERVER + "response_time")
            out.extend(f"{sent}:{ms}|ms{tail}\n".encode() for ms in timers)
        return out

    def __repr__(self) -> str:
        where = self.host if self.protocol == "unix" else f"{self.host}:{self.port}"
        return f"DogStatsdSink({self.protocol}://{where})"


def _one_line(text: str) -> str:
    return text.replace("\n", "").replace("\r", "") if "\n" in text or "\r" in text else text

"""Settings of ``ratewarden serve``: a flag wins over its environment variable, then the default.

Every option has one flag and one ``RATEWARDEN_*`` variable (the table is
``OPTIONS``). Flags and variables arrive as text and go through the same parser,
so a bad value reads the same whichever way it was given, and the message names
the flag or variable it came from::

    --config PATH...       RATEWARDEN_CONFIG          (several paths: separate with ":")
    --store URL            RATEWARDEN_STORE           memory (default), redis://, rediss://, ...
    --host H               RATEWARDEN_HOST            127.0.0.1
    --grpc-port N          RATEWARDEN_GRPC_PORT       8081
    --http-port N          RATEWARDEN_HTTP_PORT       8080
    --workers N            RATEWARDEN_WORKERS         1
    --reload-interval S    RATEWARDEN_RELOAD_INTERVAL 5 (0 turns hot reload off)
    --health-interval S    RATEWARDEN_HEALTH_INTERVAL 2
    --grace S              RATEWARDEN_GRACE           10
    --[no-]shadow          RATEWARDEN_SHADOW          false
    --[no-]charge-denied   RATEWARDEN_CHARGE_DENIED   false
    --near-limit-ratio R   RATEWARDEN_NEAR_LIMIT_RATIO 0.8
    --on-error open|closed RATEWARDEN_ON_ERROR        open
    --log-level L          RATEWARDEN_LOG_LEVEL       info
    --log-format F         RATEWARDEN_LOG_FORMAT      json
    --dashboard W          RATEWARDEN_DASHBOARD       loopback (also: any, off)
    --tls-cert PATH        RATEWARDEN_TLS_CERT        PEM certificate chain: gRPC over TLS
    --tls-key PATH         RATEWARDEN_TLS_KEY         its PEM private key
    --tls-client-ca PATH   RATEWARDEN_TLS_CLIENT_CA   PEM CA for client certs (mTLS)
    --max-values-per-rule N RATEWARDEN_MAX_VALUES_PER_RULE 100000 (0 turns the cap off)
    --response-headers M   RATEWARDEN_RESPONSE_HEADERS off (also: legacy, draft-10)
    --breaker-failures N   RATEWARDEN_BREAKER_FAILURES 5 (0 turns the circuit breaker off)
    --breaker-cooldown S   RATEWARDEN_BREAKER_COOLDOWN 1
    --over-limit-cache N   RATEWARDEN_OVER_LIMIT_CACHE 10000 (0 turns it off)
    --loop L               RATEWARDEN_LOOP            auto (uvloop if installed), asyncio, uvloop

Secrets stay out of output: ``repr(settings)`` and every error message show the
store URL with its password replaced by ``***`` (``redacted``).
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ratewarden.errors import ConfigurationError

__all__ = ["OPTIONS", "Option", "Settings", "redacted", "resolve", "store_scheme"]

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "text")
ON_ERROR = ("open", "closed")
DASHBOARD = ("loopback", "any", "off")
RESPONSE_HEADERS = ("off", "legacy", "draft-10")
LOOPS = ("auto", "asyncio", "uvloop")
_TRUE = ("1", "true", "yes", "on")
_PASSWORD_OPTION = re.compile(r"([?&][^=&#]*password[^=&#]*=)[^&#]*", re.IGNORECASE)
_FALSE = ("0", "false", "no", "off")


def uvloop_installed() -> bool:
    """Whether the ``uvloop`` package can be imported here (``--loop auto`` then uses it)."""
    return importlib.util.find_spec("uvloop") is not None


def redacted(url: str) -> str:
    """``url`` with every password replaced by ``***``, for logs and messages.

    That is the password of its ``user:password@`` part (a URL without a user,
    ``redis://:secret@host``, keeps its empty user) and the value of any query
    option named like ``password`` (``?sentinel_password=...``).
    """
    url = _PASSWORD_OPTION.sub(r"\1***", url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "***@" + url.rpartition("@")[2] if "@" in url else url
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url
    credentials, _, host = authority.rpartition("@")
    user, colon, _ = credentials.partition(":")
    shown = f"{user}:***" if colon else "***"
    return f"{scheme}://{shown}@{host}{slash}{path}"


def store_scheme(url: str) -> str:
    """``memory`` for the embedded store (``memory`` or ``memory://``), else the URL's scheme."""
    if url in ("memory", "memory://"):
        return "memory"
    return urlsplit(url).scheme.lower()


@dataclass(frozen=True, slots=True)
class Settings:
    """What one ``ratewarden serve`` runs with; validated when built."""

    config_paths: tuple[str, ...]
    store_url: str = "memory"
    host: str = "127.0.0.1"
    grpc_port: int = 8081
    http_port: int = 8080
    workers: int = 1
    reload_interval: float = 5.0
    health_interval: float = 2.0
    grace: float = 10.0
    shadow: bool = False
    charge_denied: bool = False
    near_limit_ratio: float = 0.8
    on_error: str = "open"
    log_level: str = "info"
    log_format: str = "json"
    dashboard: str = "loopback"
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    max_values_per_rule: int = 100_000
    response_headers: str = "off"
    breaker_failures: int = 5
    breaker_cooldown: float = 1.0
    over_limit_cache: int = 10_000
    loop: str = "auto"

    def __repr__(self) -> str:
        shown = []
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            text = repr(redacted(value)) if name == "store_url" else repr(value)
            shown.append(f"{name}={text}")
        return f"Settings({', '.join(shown)})"

    def __post_init__(self) -> None:
        self._check_tls()
        if not self.config_paths:
            raise ConfigurationError(
                "no config given: pass --config PATH (a file or directory) or set RATEWARDEN_CONFIG"
            )
        if not store_scheme(self.store_url):
            raise ConfigurationError(
                f"store URL {redacted(self.store_url)!r} has no scheme; use memory, "
                "redis://host:6379/0, "
                "rediss://..., or a Sentinel or Cluster URL"
            )
        if self.workers > 1 and store_scheme(self.store_url) == "memory":
            raise ConfigurationError(
                f"{self.workers} workers on the memory store would each keep their own counters, "
                "admitting up to that many times every limit; use --store redis://... to share "
                "them, or one worker"
            )
        if self.workers > 1 and 0 in (self.grpc_port, self.http_port):
            raise ConfigurationError(
                f"{self.workers} workers need fixed ports to share; port 0 picks a different "
                "port in every process"
            )
        if self.grpc_port == self.http_port != 0:
            raise ConfigurationError(
                f"--grpc-port and --http-port are both {self.grpc_port}; give them different ports"
            )
        if self.loop == "uvloop" and not uvloop_installed():
            raise ConfigurationError(
                "--loop uvloop: the uvloop package is not installed; pip install uvloop "
                "('ratewarden[server]' brings it on Linux and macOS) or use --loop asyncio"
            )

    def _check_tls(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            given, missing = (
                ("--tls-cert", "--tls-key") if self.tls_key is None else ("--tls-key", "--tls-cert")
            )
            raise ConfigurationError(
                f"{given} is set but {missing} is not; TLS needs both the certificate and its key"
            )
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ConfigurationError(
                "--tls-client-ca is set without --tls-cert/--tls-key; mutual TLS needs the "
                "server's own certificate too"
            )

    @property
    def tls(self) -> bool:
        """Whether the gRPC port speaks TLS (mutual TLS when ``tls_client_ca`` is set)."""
        return self.tls_cert is not None

    @property
    def reuse_port(self) -> bool:
        """Share the listening ports between worker processes (SO_REUSEPORT).

        Off for one process, so that a second server on the same port fails loudly
        instead of silently splitting the traffic.
        """
        return self.workers > 1


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: its flag, its environment variable and how to read its text."""

    flag: str
    env: str
    parse: Callable[[Any], Any]
    help: str


def _text(value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ConfigurationError("must not be empty")
    return text


def _paths(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list | tuple) else str(value).split(os.pathsep)
    paths = tuple(str(item).strip() for item in items if str(item).strip())
    if not paths:
        raise ConfigurationError("must name at least one config file or directory")
    return paths


def _integer(low: int, high: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        try:
            number = int(str(value).strip(), 10)
        except ValueError:
            raise ConfigurationError(f"must be a whole number from {low} to {high}") from None
        if not low <= number <= high:
            raise ConfigurationError(f"must be a whole number from {low} to {high}")
        return number

    return parse


def _seconds(low: float, *, allow_low: bool) -> Callable[[Any], float]:
    bound = f">= {low:g}" if allow_low else f"> {low:g}"

    def parse(value: Any) -> float:
        try:
            number = float(str(value).strip())
        except ValueError:
            raise ConfigurationError(f"must be a number of seconds {bound}") from None
        if not math.isfinite(number) or number < low or (number == low and not allow_low):
            raise ConfigurationError(f"must be a number of seconds {bound}")
        return number

    return parse


def _ratio(value: Any) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ConfigurationError("must be a number between 0 and 1") from None
    if not 0.0 < number <= 1.0:
        raise ConfigurationError("must be a number above 0 and at most 1")
    return number


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigurationError(f"must be one of {', '.join(_TRUE + _FALSE)}")


def _choice(choices: Sequence[str]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ConfigurationError(f"must be one of: {', '.join(choices)}")
        return text

    return parse


#: Every setting by its ``Settings`` field name.
OPTIONS: dict[str, Option] = {
    "config_paths": Option(
        "--config",
        "RATEWARDEN_CONFIG",
        _paths,
        "rule files or directories (envoyproxy/ratelimit YAML); repeat or list several",
    ),
    "store_url": Option(
        "--store",
        "RATEWARDEN_STORE",
        _text,
        "memory (default), redis://, rediss://, or a Sentinel or Cluster URL",
    ),
    "host": Option("--host", "RATEWARDEN_HOST", _text, "address both servers bind (127.0.0.1)"),
    "grpc_port": Option(
        "--grpc-port", "RATEWARDEN_GRPC_PORT", _integer(0, 65535), "gRPC port (8081)"
    ),
    "http_port": Option(
        "--http-port", "RATEWARDEN_HTTP_PORT", _integer(0, 65535), "HTTP port (8080)"
    ),
    "workers": Option(
        "--workers",
        "RATEWARDEN_WORKERS",
        _integer(1, 256),
        "processes sharing the ports (1); more than one needs a shared store",
    ),
    "reload_interval": Option(
        "--reload-interval",
        "RATEWARDEN_RELOAD_INTERVAL",
        _seconds(0.0, allow_low=True),
        "seconds between checks of the config files for changes (5; 0 turns reload off)",
    ),
    "health_interval": Option(
        "--health-interval",
        "RATEWARDEN_HEALTH_INTERVAL",
        _seconds(0.0, allow_low=False),
        "seconds between pings of the store for the health status (2)",
    ),
    "grace": Option(
        "--grace",
        "RATEWARDEN_GRACE",
        _seconds(0.0, allow_low=True),
        "seconds in-flight calls get to finish on SIGTERM (10)",
    ),
    "shadow": Option(
        "--shadow",
        "RATEWARDEN_SHADOW",
        _boolean,
        "global shadow mode: count and report, but the overall answer is always OK",
    ),
    "charge_denied": Option(
        "--charge-denied",
        "RATEWARDEN_CHARGE_DENIED",
        _boolean,
        "charge every descriptor of a denied request (envoyproxy/ratelimit's old behaviour)",
    ),
    "near_limit_ratio": Option(
        "--near-limit-ratio",
        "RATEWARDEN_NEAR_LIMIT_RATIO",
        _ratio,
        "share of a limit above which a hit counts as near the limit (0.8)",
    ),
    "on_error": Option(
        "--on-error",
        "RATEWARDEN_ON_ERROR",
        _choice(ON_ERROR),
        "answer when a call fails unexpectedly: open allows (default), closed denies",
    ),
    "log_level": Option(
        "--log-level", "RATEWARDEN_LOG_LEVEL", _choice(LOG_LEVELS), "debug, info, warning, error"
    ),
    "log_format": Option(
        "--log-format",
        "RATEWARDEN_LOG_FORMAT",
        _choice(LOG_FORMATS),
        "json (one object a line, default) or text",
    ),
    "dashboard": Option(
        "--dashboard",
        "RATEWARDEN_DASHBOARD",
        _choice(DASHBOARD),
        "who may open /dashboard on the HTTP port: loopback clients (default), any, or off",
    ),
    "tls_cert": Option(
        "--tls-cert",
        "RATEWARDEN_TLS_CERT",
        _text,
        "PEM certificate chain: serve gRPC over TLS (with --tls-key)",
    ),
    "tls_key": Option("--tls-key", "RATEWARDEN_TLS_KEY", _text, "PEM private key of --tls-cert"),
    "tls_client_ca": Option(
        "--tls-client-ca",
        "RATEWARDEN_TLS_CLIENT_CA",
        _text,
        "PEM CA certificates: require client certificates they signed (mutual TLS)",
    ),
    "max_values_per_rule": Option(
        "--max-values-per-rule",
        "RATEWARDEN_MAX_VALUES_PER_RULE",
        _integer(0, 100_000_000),
        "distinct counters one rule may hold per window before new values share one overflow "
        "counter (100000; 0 turns the cap off)",
    ),
    "response_headers": Option(
        "--response-headers",
        "RATEWARDEN_RESPONSE_HEADERS",
        _choice(RESPONSE_HEADERS),
        "rate limit headers Envoy adds to responses: off (default), legacy "
        "(RateLimit-Limit/Remaining/Reset) or draft-10 (RateLimit-Policy and RateLimit)",
    ),
    "breaker_failures": Option(
        "--breaker-failures",
        "RATEWARDEN_BREAKER_FAILURES",
        _integer(0, 1_000_000),
        "consecutive store failures that open the circuit breaker, after which failure_mode "
        "answers without waiting on the store (5; 0 turns the breaker off)",
    ),
    "breaker_cooldown": Option(
        "--breaker-cooldown",
        "RATEWARDEN_BREAKER_COOLDOWN",
        _seconds(0.0, allow_low=False),
        "seconds the open breaker waits before one probe call tries the store again (1)",
    ),
    "loop": Option(
        "--loop",
        "RATEWARDEN_LOOP",
        _choice(LOOPS),
        "event loop: auto (uvloop when it is installed, else asyncio's; default), asyncio, uvloop",
    ),
    "over_limit_cache": Option(
        "--over-limit-cache",
        "RATEWARDEN_OVER_LIMIT_CACHE",
        _integer(0, 10_000_000),
        "counters denied by the store that are remembered until their retry time and denied "
        "without a store call (10000; 0 turns the cache off)",
    ),
}


def resolve(flags: Mapping[str, Any], environ: Mapping[str, str]) -> Settings:
    """Build ``Settings`` from parsed flags (``None`` = not given) over ``environ``.

    Raises ``ConfigurationError`` naming the flag or variable whose value is wrong.
    """
    values: dict[str, Any] = {}
    for name, option in OPTIONS.items():
        raw = flags.get(name)
        source = option.flag
        if raw is None:
            raw = environ.get(option.env)
            source = option.env
        if raw is None:
            continue
        try:
            values[name] = option.parse(raw)
        except ConfigurationError as exc:
            shown = " ".join(raw) if isinstance(raw, list) else raw
            if name == "store_url":
                shown = redacted(str(shown))
            raise ConfigurationError(f"{source} {shown!r}: {exc}") from None
    values.setdefault("config_paths", ())
    return Settings(**values)

"""How an option's text is read: one parser per kind of value, each raising
``ConfigurationError`` with what a good value looks like (``options.read`` adds the
flag or variable it came from), and ``Option``, one row of the options' table.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]

from ratewarden.errors import ConfigurationError
from ratewarden.server.response_headers import check_header_names
from ratewarden.server.statsd import parse_address, parse_tags
from ratewarden.server.store_url import redacted

__all__ = [
    "Option",
    "boolean",
    "choice",
    "header_names",
    "headers",
    "hidden",
    "integer",
    "masked",
    "metrics_path",
    "pairs",
    "paths",
    "ratio",
    "seconds",
    "statsd_address",
    "statsd_tags",
    "target",
    "text",
    "yaml_file",
]


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: its flag, how to read its text, its help, and its environment variable."""

    flag: str
    parse: Callable[[Any], Any]
    help: str

    @property
    def env(self) -> str:
        """``RATEWARDEN_`` and the flag's name: ``--grpc-port``, ``RATEWARDEN_GRPC_PORT``."""
        return "RATEWARDEN_" + self.flag.removeprefix("--").replace("-", "_").upper()


TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def text(value: Any) -> str:
    stripped = str(value).strip()
    if not stripped:
        raise ConfigurationError("must not be empty")
    return stripped


def paths(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list | tuple) else str(value).split(os.pathsep)
    paths = tuple(str(item).strip() for item in items if str(item).strip())
    if not paths:
        raise ConfigurationError("must name at least one config file or directory")
    return paths


GRPC_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:")
HEADER_NAME = re.compile(r"[0-9a-z_.-]+")


def target(value: Any) -> str:
    """A gRPC target: ``HOST:PORT`` (``[::1]:PORT`` for IPv6), or a URI such as ``dns:///...``."""
    given = text(value)
    if given.startswith(GRPC_SCHEMES):
        return given
    scheme, slashes, rest = given.partition("://")
    if slashes:
        # gRPC would read "http" as a host name and retry it for ever.
        address = rest.split("/")[0] or "HOST:PORT"
        raise ConfigurationError(
            f"{scheme}:// is not a gRPC target: give HOST:PORT ({address}) or a gRPC target "
            "URI (dns:///..., unix:PATH)"
        )
    host, _, port = given.rpartition(":")
    if not host or "/" in host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigurationError(
            "must be HOST:PORT (such as xds-server:18000) or a gRPC target URI (dns:///..., "
            "unix:PATH)"
        )
    return given


def pairs(value: Any) -> tuple[tuple[str, str], ...]:
    """``KEY=VALUE,KEY=VALUE``: pairs in order; empty text is none."""
    found = []
    for item in str(value).split(","):
        if not item.strip():
            continue
        key, equals, rest = item.partition("=")
        if not equals or not key.strip():
            raise ConfigurationError(f"{item.strip()!r} is not KEY=VALUE; separate pairs with ','")
        found.append((key.strip(), rest.strip()))
    return tuple(found)


def headers(value: Any) -> tuple[tuple[str, str], ...]:
    """``pairs`` as gRPC metadata: lowercase names of letters, digits, '-', '_' and '.'."""
    found = tuple((key.lower(), item) for key, item in pairs(value))
    for key, item in found:
        if not HEADER_NAME.fullmatch(key) or key.startswith("grpc-") or key.endswith("-bin"):
            raise ConfigurationError(
                f"header name {key!r} cannot be sent: use letters, digits, '-', '_' and '.', "
                "not starting with 'grpc-' nor ending with '-bin'"
            )
        if not item.isprintable() or not item.isascii():
            raise ConfigurationError(f"header {key!r}: its value must be printable ASCII")
    return found


def hidden(value: Any, separator: str = "=") -> Any:
    """``value`` (headers, as pairs or as ``KEY=VALUE,...`` text) with every value ``***``:
    a header may carry a token, which no log line or error message shows."""
    if isinstance(value, tuple):
        return tuple((key, "***") for key, _ in value)
    return ",".join(
        item.partition(separator)[0] + (f"{separator}***" if separator in item else "")
        for item in str(value).split(",")
    )


def masked(name: str, value: Any) -> Any:
    """Setting ``name``'s ``value`` as a log line, an error or a repr may show it: a store
    URL with its password ``***`` (``redacted``), the xDS headers' values ``***`` (a header
    may carry a token)."""
    if name in ("store_url", "store_per_second") and value is not None:
        return redacted(str(value))
    if name == "xds_headers":
        return hidden(value)
    return value


def integer(low: int, high: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        try:
            number = int(str(value).strip(), 10)
        except ValueError:
            raise ConfigurationError(f"must be a whole number from {low} to {high}") from None
        if not low <= number <= high:
            raise ConfigurationError(f"must be a whole number from {low} to {high}")
        return number

    return parse


def seconds(low: float, *, allow_low: bool) -> Callable[[Any], float]:
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


def ratio(value: Any) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ConfigurationError("must be a number between 0 and 1") from None
    if not 0.0 < number <= 1.0:
        raise ConfigurationError("must be a number above 0 and at most 1")
    return number


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in TRUE:
        return True
    if lowered in FALSE:
        return False
    raise ConfigurationError(f"must be one of {', '.join(TRUE + FALSE)}")


def choice(choices: Sequence[str]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        lowered = str(value).strip().lower()
        if lowered not in choices:
            raise ConfigurationError(f"must be one of: {', '.join(choices)}")
        return lowered

    return parse


def statsd_address(value: Any) -> str:
    """A StatsD server as ``tcp://HOST:PORT`` or ``udp://HOST:PORT`` (``HOST:PORT``: TCP)."""
    protocol, host, port = parse_address(str(value))
    return f"{protocol}://{f'[{host}]' if ':' in host else host}:{port}"


def statsd_tags(value: Any) -> tuple[tuple[str, str], ...]:
    """``NAME:VALUE,NAME:VALUE`` as pairs (pairs already read pass through)."""
    return value if isinstance(value, tuple) else parse_tags(str(value))


def header_names(value: Any) -> tuple[str, str, str]:
    """The three legacy header names, ``LIMIT,REMAINING,RESET``."""
    names = value if isinstance(value, tuple) else [n.strip() for n in str(value).split(",")]
    try:
        return check_header_names(names)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None


def metrics_path(value: Any) -> str:
    """A URL path such as ``/metrics``: no query, no fragment, no space."""
    path = text(value)
    if not path.startswith("/") or any(c.isspace() or c in "?#" for c in path):
        raise ConfigurationError("must be a path starting with /, such as /metrics")
    return path


def yaml_file(path: Path) -> Any:
    """The YAML document in the file at ``path``; raises ``ConfigurationError`` naming the
    file when it cannot be read or is not YAML."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{path} is not YAML: {exc}") from None

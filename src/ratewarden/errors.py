"""The whole exception tree of ratewarden.

::

    RatewardenError
     ├── ConfigurationError        bad rate, algorithm, cost, key or option; nothing changed
     │    └── server.config.ConfigError   a rule file is wrong (every message has file:line)
     ├── StorageError
     │    └── StorageUnavailableError   the store did not answer in time, or refused the connection
     │         └── CircuitOpenError       the circuit breaker is open: the store was not asked
     ├── ServiceUnavailableError   ratewarden serve has no rules yet (--xds-force-start)
     ├── client.RetriesExhaustedError   the client gave up: the next wait would pass its cap
     └── client.HostCircuitOpenError    the client's circuit for a host is open: nothing sent
          (also httpx.TransportError or requests.ConnectionError, so their handlers catch it)

The three outside this module live next to the only code that raises them (the
server's config loader, the HTTP client), so importing ``ratewarden`` never
pulls in YAML or httpx.

Being over a limit is never an exception: ``Limiter.hit`` returns a ``Decision``
whose ``allowed`` is False. Storage errors are raised at one boundary, where a
client library's exception becomes ours (``raise ... from exc``), so callers and
failure modes catch exactly one type.

A message shows the value it refuses with ``shown(value)``: its repr, cut short when long (a
key or a rate string from a request may be a megabyte, and the message goes into a log line).
"""

from __future__ import annotations

import math

__all__ = [
    "CircuitOpenError",
    "ConfigurationError",
    "RatewardenError",
    "ServiceUnavailableError",
    "StorageError",
    "StorageUnavailableError",
    "shown",
]


class RatewardenError(Exception):
    """Base class of every error ratewarden raises."""


class ConfigurationError(RatewardenError, ValueError):
    """Bad input: the message names the offending value and what to do about it."""


class ServiceUnavailableError(RatewardenError):
    """The service cannot decide yet: ``ratewarden serve`` opened its ports before its first
    rules arrived (``--xds-force-start``). The transports answer it ``UNAVAILABLE`` (gRPC)
    or 503 (``/json``), so Envoy's ``failure_mode_deny`` decides, as for any failed call."""


class StorageError(RatewardenError):
    """The store failed to apply a decision."""


class StorageUnavailableError(StorageError):
    """The store could not be reached or did not answer within its timeout.

    Nothing is known about whether the decision was applied; failure modes
    (open, closed, local) act on this error.
    """


class CircuitOpenError(StorageUnavailableError):
    """The circuit breaker is open after store failures: the store was not asked.

    Raised (or handed to the failure mode) instead of paying the store's
    timeout on every call during an outage; one probe per cool-down asks again.
    """


#: The most of a value an error message shows: ``shown`` cuts a longer one.
_SHOWN = 60


def shown(value: object) -> str:
    """``value`` as an error message shows it, at most about 120 characters: its repr; text
    or bytes longer than 60 as their first 60 and their length, a whole number past about
    70 digits as its count of digits (``repr`` refuses one past 4,300), any other repr past
    120 characters cut to 60. A key or a rate taken from a request may be a megabyte, and
    an error message goes whole into a log line."""
    if isinstance(value, str | bytes) and len(value) > _SHOWN:
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:_SHOWN]!r}... ({len(value):,} {unit})"
    if isinstance(value, int) and value.bit_length() > 4 * _SHOWN:  # past int's own limit too
        digits = math.floor(value.bit_length() * math.log10(2)) + 1
        return f"a {'negative ' if value < 0 else ''}number of about {digits:,} digits"
    try:
        text = repr(value)
    except ValueError:  # an int inside, past int's own limit on digits
        text = f"<{type(value).__name__}>"
    if len(text) <= 2 * _SHOWN:
        return text
    return f"{text[:_SHOWN]}... (a {type(value).__name__} written in {len(text):,} characters)"

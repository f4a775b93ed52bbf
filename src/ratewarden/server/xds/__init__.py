"""Rules over xDS: ``ratewarden serve --config-xds HOST:PORT`` (CONFIG_TYPE=GRPC_XDS_SOTW upstream).

One concept a module, each importing only those above it:

- ``messages``: envoyproxy/ratelimit's ``RateLimitConfig`` messages, built from their
  definition at import time (``xds-protos`` does not ship them);
- ``rules``: the resources as rule documents, loaded by the rule files' reader;
- ``source``: the server and how to ask it, from ``serve``'s settings;
- ``client``: the ADS subscription (ACK, NACK, reconnecting with backoff).

docs/xds.md says how to use it.
"""

from __future__ import annotations

from ratewarden.server.xds.client import XdsSubscription, backoff
from ratewarden.server.xds.messages import TYPE_URL
from ratewarden.server.xds.rules import load_resources
from ratewarden.server.xds.source import XdsSource, XdsTls, source_of

__all__ = [
    "TYPE_URL",
    "XdsSource",
    "XdsSubscription",
    "XdsTls",
    "backoff",
    "load_resources",
    "source_of",
]

"""The key schema: how a (key, algorithm, rate) names its state in a store.

``<prefix>:{<escaped key>}:<algorithm>:<period_us>`` for the window algorithms
(``fixed_window``, ``sliding_window``, ``sliding_log``), and
``<prefix>:{<escaped key>}:<algorithm>:<limit>:<period_us>:<capacity>`` for the
buckets (``gcra``, ``token_bucket``, ``leaky_bucket``): ``algorithms.state_suffix``
writes what follows the closing brace. A window's state counts what was admitted,
whatever the limit, so a limit changed mid-window goes on counting (as
envoyproxy/ratelimit's keys, which hold no limit either); a bucket's state means
something only at its rate, so a changed rate starts afresh.

The user's key is the Redis Cluster hash tag, so every layer of one decision
lands in one slot and one script can update them atomically. Inside the braces
``%``, ``{`` and ``}`` are percent-escaped; everything after the closing brace
is generated from numbers and a fixed algorithm name. Escaping is injective and
the closing brace is unambiguous, so two distinct (key, algorithm, period) of a
window, or (key, algorithm, rate) of a bucket, can never share a store key.
"""

from __future__ import annotations

from ratewarden.algorithms import state_suffix
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate

__all__ = ["DEFAULT_PREFIX", "check_prefix", "escape", "hash_tag", "state_key"]

DEFAULT_PREFIX = "rw"

_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})


def escape(key: str) -> str:
    """Percent-escape the three characters that could end or confuse the hash tag."""
    # Most keys have none of them: three scans cost a tenth of a translate().
    if "%" not in key and "{" not in key and "}" not in key:
        return key
    return key.translate(_ESCAPES)


def hash_tag(key: str) -> str:
    """What a store puts between the braces of every state key of ``key``: its Cluster hash
    tag, so ``CLUSTER KEYSLOT`` of the tag is the slot of the key's state (hot keys place
    their cells by it)."""
    return escape(key)


def check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise ConfigurationError(
            f"key prefix {prefix!r} must be a non-empty string without '{{' or '}}'"
        )
    return prefix


def state_key(prefix: str, key: str, algorithm: str, rate: Rate) -> str:
    """The store key of ``key``'s state under ``algorithm`` and ``rate``."""
    return f"{prefix}:{{{escape(key)}}}{state_suffix(algorithm, rate)}"

"""The key schema: how a (key, algorithm, rate) names its state in a store.

``<prefix>:{<escaped key>}:<algorithm>:<limit>:<period_us>:<capacity>``

The user's key is the Redis Cluster hash tag, so every layer of one decision
lands in one slot and one script can update them atomically. Inside the braces
``%``, ``{`` and ``}`` are percent-escaped; everything after the closing brace
is generated from numbers and a fixed algorithm name. Escaping is injective and
the closing brace is unambiguous, so two distinct (key, algorithm, rate) triples
can never share a store key.
"""

from __future__ import annotations

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
    return f"{prefix}:{{{escape(key)}}}:{algorithm}:{rate.limit}:{rate.period_us}:{rate.capacity}"

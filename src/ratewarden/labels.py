"""One bound on the length of every metric label and dashboard string.

Rule names and keys can carry request values: Envoy's per-descriptor limit
override names its rule after the descriptor's values, and ``detailed_metric``
or ``value_to_metric`` put values in the stats key. Envoy forwards header values
of up to 60 KiB, so without a bound one client could make every series of
``/metrics`` and every row of ``/dashboard.json`` that long.

``bounded`` keeps a text of at most ``limit`` characters as it is. A longer one
keeps its start, then ``…`` and 16 hex digits of a BLAKE2b hash of the whole
text, ``limit`` characters in all. The hash keeps distinct long values distinct
(two collide with probability 2**-64), and it is the same in every process and
run, so worker processes and restarts agree on a label.

A leaf (it imports nothing of ratewarden): the metrics, the server's stats and
its dashboard bound their strings with it, and so can a custom ``Metrics``.
"""

from __future__ import annotations

import hashlib

__all__ = ["HASH_CHARS", "MARKER", "MAX_LABEL_CHARS", "MIN_LIMIT", "bounded"]

#: The longest metric label value and dashboard rule name, in characters.
MAX_LABEL_CHARS = 128
#: Marks where a bounded text was cut; the hash of the whole text follows it.
MARKER = "\u2026"
#: Hex digits of the hash (8 bytes).
HASH_CHARS = 16
#: The smallest ``limit``: the marker, the hash, and 15 characters of the text.
MIN_LIMIT = 32


def bounded(text: str, limit: int = MAX_LABEL_CHARS) -> str:
    """``text`` if it has at most ``limit`` characters, else its start, ``…`` and a hash.

    >>> bounded("api_key")
    'api_key'
    >>> cut = bounded("k" * 1000, 40)
    >>> len(cut), cut[:23]
    (40, 'kkkkkkkkkkkkkkkkkkkkkkk')
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"bounded: limit must be at least {MIN_LIMIT} characters, got {limit!r}")
    if len(text) <= limit:
        return text
    # surrogatepass: a lone surrogate (possible in a Python str, never from protobuf)
    # must not turn a label into an exception on the request path.
    digest = hashlib.blake2b(
        text.encode("utf-8", "surrogatepass"), digest_size=HASH_CHARS // 2
    ).hexdigest()
    return text[: limit - 1 - HASH_CHARS] + MARKER + digest

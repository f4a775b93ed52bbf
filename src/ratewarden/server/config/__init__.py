"""Rate limit rules: envoyproxy/ratelimit YAML, unchanged, plus ratewarden's extensions.

``load(["rules/"])`` reads files and directories (the ``*.yaml`` and ``*.yml``
files of a directory, in name order, hidden names skipped; with ``files="all"`` every
file of it and its subdirectories, as envoyproxy/ratelimit) and returns a frozen
``RateLimitConfig``, or raises ``ConfigError`` listing every problem it found as
``file:line: key: what is wrong and what to do``. docs/config.md documents every
key.

The package, one concept a module, each importing only those above it:

- ``model``: the rule model (``DescriptorRule``, ``Limit``), the names a rule may use,
  and the errors;
- ``tree``: the descriptor tree the rules hang in and its matching (``Level``, ``Node``,
  ``DomainConfig``, ``RateLimitConfig``);
- ``fields``: reading values out of a file's YAML nodes, recording each problem;
- ``limits``: reading one limit's fields, written alike in both blocks;
- ``rate_limit`` and ``budget``: reading a descriptor's ``rate_limit`` and ``budget``;
- ``rlqs_weights``: reading a descriptor's ``rlqs_weights`` (RLQS peers' weights);
- ``metadata``: reading a descriptor's ``metadata`` as envoyproxy/ratelimit reads it;
- ``reader``: one file's YAML, walked into a ``DomainConfig``;
- ``directory``: which files of a directory are rules (``walk``), and what it skips;
- ``loading``: files and directories into a ``RateLimitConfig`` (``load``, ``loads``).

It is pure: no I/O beyond reading the given files, no clock, no store.
"""

from __future__ import annotations

import warnings
from typing import Any

from ratewarden.deprecation import moved
from ratewarden.server.config import model, tree
from ratewarden.server.config.loading import load, load_documents, loads
from ratewarden.server.config.model import *  # noqa: F403
from ratewarden.server.config.tree import *  # noqa: F403

# The loaders and every name of the rule model and its tree: the lists are the modules' own
# __all__ (as asyncio re-exports its parts), so a name added to either is exported here too.
__all__ = ["load", "load_documents", "loads"]
__all__ += model.__all__
__all__ += tree.__all__

# Names this module used to hold beside __all__, and where they live now: they still
# resolve, with a DeprecationWarning, for one release (docs/reference.md says so).
_moved = moved(
    __name__,
    {"ConfigurationError": "ratewarden", "MAX_ALIAS_COPIES": "ratewarden.server.config.reader"},
)


def __getattr__(name: str) -> Any:
    """The names that moved, and ``Rule``: ``DescriptorRule`` now, so that ``Rule`` is only
    the middleware's HTTP rule (``ratewarden.middleware.Rule``)."""
    if name == "Rule":
        warnings.warn(
            f"{__name__}.Rule is deprecated; it is {__name__}.DescriptorRule "
            "(ratewarden.middleware.Rule is the HTTP middleware's rule)",
            DeprecationWarning,
            stacklevel=2,
        )
        return model.DescriptorRule
    return _moved(name, depth=1)  # the warning names the caller's line, not this one

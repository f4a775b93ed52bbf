"""``ratewarden simulate --accuracy``: its flags' values, checked and named by their flags.

``models`` reads ``--model`` and ``sizes`` reads ``--requests``, ``--sources`` and ``--load``
(the defaults filled in); a value ``accuracy.prepare`` would refuse is refused here first
as ``FLAG 'value': ...``, the way every other flag's bad value is said.
"""

from __future__ import annotations

from collections.abc import Sequence

from ratewarden.errors import ConfigurationError
from ratewarden.simulate import accuracy

__all__ = ["DEFAULT_LOAD", "DEFAULT_REQUESTS", "DEFAULT_SOURCES", "models", "sizes"]

DEFAULT_REQUESTS = 4_000_000
DEFAULT_SOURCES = 5_000
DEFAULT_LOAD = 0.5


def models(names: Sequence[str] | None) -> list[str]:
    """The traffic models of ``--model`` (every model when none is given), each known."""
    chosen = list(dict.fromkeys(names or accuracy.MODELS))
    for model in (m for m in chosen if m not in accuracy.MODELS):
        choices = ", ".join(accuracy.MODELS)
        raise ConfigurationError(
            f"--model {model!r}: unknown traffic model; choose one of: {choices}"
        )
    return chosen


def sizes(
    requests: int | None, sources: int | None, loads: Sequence[float] | None
) -> tuple[int, int, list[float]]:
    """``--requests``, ``--sources`` and every ``--load``, defaults filled in. Their parsers
    took whole numbers above 0 and loads in range; the sizes' upper bounds are checked here."""
    count = DEFAULT_REQUESTS if requests is None else requests
    if count > accuracy.MAX_REQUESTS:
        raise ConfigurationError(
            f"--requests '{count}': must be from 1 to {accuracy.MAX_REQUESTS:,}"
        )
    keys = DEFAULT_SOURCES if sources is None else sources
    if keys > accuracy.MAX_SOURCES:
        raise ConfigurationError(f"--sources '{keys}': must be from 1 to {accuracy.MAX_SOURCES:,}")
    if keys > count:
        given = f"--requests {count:,}" + (", the default" if requests is None else "")
        raise ConfigurationError(
            f"--sources '{keys}': must be at most the number of requests ({given})"
        )
    return count, keys, list(loads or [DEFAULT_LOAD])

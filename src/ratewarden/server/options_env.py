"""The ``RATEWARDEN_*`` variables of ``ratewarden serve``'s environment, as the options read them.

``RATEWARDEN_`` is ratewarden's own prefix, so a variable under it that no option reads is
almost always a misspelt one (``RATEWARDEN_WORKER``), which would otherwise be ignored
without a word while the setting keeps its default: ``unknown`` finds those, each with the
nearest variable meant, for ``serve`` to warn about at start (``unknown_variables``). The
variables ratewarden reads for other purposes (``OTHER_VARIABLES``) are no typos.

``given_as`` names each option as it was given, flag or variable, for a message about
several options together.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any

from ratewarden.server.options import OPTIONS

__all__ = ["OTHER_VARIABLES", "PREFIX", "given_as", "unknown"]

PREFIX = "RATEWARDEN_"

#: ``RATEWARDEN_*`` names ratewarden reads, or documents, that are no option of ``serve``:
#: the pure-Python switch (docs/storage.md), the test and script knobs (docs/reliability.md,
#: docs/operations.md, ``scripts/_env.sh``), and the Django settings of the middleware
#: (docs/middleware.md), which some deployments fill from variables of the same name.
OTHER_VARIABLES = frozenset(
    {
        "RATEWARDEN_PURE",
        "RATEWARDEN_SOAK_SECONDS",
        "RATEWARDEN_ARTIFACTS",
        "RATEWARDEN_CHROMIUM",
        "RATEWARDEN_VENV",
        "RATEWARDEN_MIDDLEWARE",
        "RATEWARDEN_CONCURRENCY",
        "RATEWARDEN_SHEDDING",
        "RATEWARDEN_TOKEN_BUDGET",
    }
)


def unknown(environ: Mapping[str, str]) -> dict[str, str | None]:
    """Each ``RATEWARDEN_*`` variable of ``environ`` that nothing reads, sorted, with the
    option's variable nearest it (or None when none is near)."""
    options = sorted(option.env for option in OPTIONS.values())
    known = set(options) | OTHER_VARIABLES
    return {
        name: _nearest(name, options)
        for name in sorted(environ)
        if name.startswith(PREFIX) and name not in known
    }


def _nearest(name: str, options: Collection[str]) -> str | None:
    """The variable of ``options`` nearest ``name``, compared without the prefix they share
    (which would make any two look alike): 0.7 of difflib's ratio, as for flags."""
    tails = {option.removeprefix(PREFIX): option for option in options}
    near = difflib.get_close_matches(name.removeprefix(PREFIX), tails, n=1, cutoff=0.7)
    return tails[near[0]] if near else None


def given_as(
    names: Collection[str], flags: Mapping[str, Any], environ: Mapping[str, str]
) -> dict[str, str]:
    """How each option of ``names`` (``Settings`` field names) was given: its flag, else its
    variable when that is set. One given by neither is named as the others were: by its
    variable when one of them was given by variable alone, else by its flag."""
    by_flag = {name for name in names if flags.get(name) is not None}
    by_variable = {name for name in names if name not in by_flag and OPTIONS[name].env in environ}
    as_variables = bool(by_variable) and not by_flag
    shown = {}
    for name in names:
        variable = name in by_variable or (as_variables and name not in by_flag)
        shown[name] = OPTIONS[name].env if variable else OPTIONS[name].flag
    return shown

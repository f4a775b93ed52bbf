"""The Lua scripts: one per algorithm, each prefixed with the shared prelude."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from importlib.resources import files

__all__ = ["Script", "script"]


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str


@functools.cache
def script(name: str) -> Script:
    """The script for algorithm (or operation) ``name``: ``_prelude.lua`` + ``<name>.lua``."""
    folder = files("ratewarden.storage.lua")
    source = (
        folder.joinpath("_prelude.lua").read_text() + folder.joinpath(f"{name}.lua").read_text()
    )
    return Script(name, source, hashlib.sha1(source.encode()).hexdigest())

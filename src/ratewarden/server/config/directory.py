"""Which files of a rule directory are rules: ``walk``, in the two ways ``--config-files`` names.

- ``yaml`` (ratewarden's default): the directory's own ``*.yaml`` and ``*.yml`` files.
- ``all`` (envoyproxy/ratelimit's, chosen by its ``RUNTIME_*`` settings): every file,
  subdirectories too, depth first in name order, as goruntime's loader walks
  ``RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY``.

Either way a hidden name (one starting with a dot) is never read, at any depth. A hidden
directory, or a link to one, is a Kubernetes ConfigMap's ``..data`` and ``..2024_...``
(the visible links through ``..data`` are read instead, so each file once) or a ``.git``:
it is passed over without a word, as upstream's ``RUNTIME_IGNOREDOTFILES=true`` does. A
link is followed to a file; a link to a directory is not followed (goruntime's walk does
not follow it either). Everything else that is not read (a hidden file, a link to a
directory or to nothing, a socket; under ``yaml`` also a file of another suffix, an
editor's backup named as such, and a subdirectory) is in ``Listing.skipped`` with the
reason, for the server to log at start and whenever it changes (``server/reload.py``):
nothing in the directory is left out silently.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ratewarden.errors import ConfigurationError

__all__ = ["FILE_MODES", "YAML_SUFFIXES", "Listing", "walk"]

#: ``--config-files`` values: what a directory given as rules contributes.
FILE_MODES = ("yaml", "all")
#: The rule files of a directory under ``--config-files yaml``.
YAML_SUFFIXES = (".yaml", ".yml")

_SUBDIRECTORY = (
    "a subdirectory, not read (--config-files all reads subdirectories, as "
    "envoyproxy/ratelimit does)"
)
_OTHER_SUFFIX = (
    "not a *.yaml or *.yml file, not read (--config-files all reads every file, as "
    "envoyproxy/ratelimit does)"
)
_BACKUP = (
    "an editor's backup or temporary file, not read (--config-files all, as "
    "envoyproxy/ratelimit, would read it as rules too: keep such files out of a directory "
    "read that way)"
)
#: How editors and tools name the backups and temporaries they leave beside a file.
_BACKUP_ENDINGS = ("~", ".bak", ".orig", ".swp", ".swo", ".tmp", ".rej")
_HIDDEN = "a hidden file (its name starts with a dot), not read; rename it to load it"
_LINKED_DIRECTORY = "a link to a directory, not followed (as envoyproxy/ratelimit's loader)"


@dataclass(frozen=True, slots=True)
class Listing:
    """What ``walk`` found under one directory: the rule ``files`` in the order they load,
    the entries ``skipped`` with why, and the directories that could not be listed
    (``errors``, with the reason)."""

    files: tuple[Path, ...]
    skipped: tuple[tuple[Path, str], ...]
    errors: tuple[tuple[Path, str], ...]


def walk(directory: Path, files: str = "yaml") -> Listing:
    """The rule files of ``directory`` under ``--config-files files`` (``FILE_MODES``)."""
    if files not in FILE_MODES:
        raise ConfigurationError(f"config files {files!r} must be one of {', '.join(FILE_MODES)}")
    found: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    errors: list[tuple[Path, str]] = []
    _walk(directory, files == "all", found, skipped, errors)
    return Listing(tuple(found), tuple(skipped), tuple(errors))


def _walk(
    directory: Path,
    every_file: bool,
    found: list[Path],
    skipped: list[tuple[Path, str]],
    errors: list[tuple[Path, str]],
) -> None:
    try:
        with os.scandir(directory) as listed:
            entries = sorted(listed, key=lambda entry: entry.name)
    except OSError as exc:
        errors.append((directory, f"cannot list it: {exc.strerror or exc}"))
        return
    for entry in entries:
        path = directory / entry.name
        hidden = entry.name.startswith(".")
        try:
            is_dir, is_file, is_link = entry.is_dir(), entry.is_file(), entry.is_symlink()
        except OSError:  # gone since it was listed, or not ours to look at
            is_dir = is_file = is_link = False
        if is_dir and hidden:
            continue  # ConfigMap's ..data and ..<timestamp>, .git: machinery, not rules
        if is_dir and is_link:
            skipped.append((path, _LINKED_DIRECTORY))
        elif is_dir and every_file:
            _walk(path, every_file, found, skipped, errors)
        elif is_dir:
            skipped.append((path, _SUBDIRECTORY))
        elif hidden:
            skipped.append((path, _HIDDEN))
        elif not is_file:
            skipped.append((path, "a link to nothing" if is_link else "not a regular file"))
        elif every_file or entry.name.endswith(YAML_SUFFIXES):
            found.append(path)
        elif _backup(entry.name):
            skipped.append((path, _BACKUP))
        else:
            skipped.append((path, _OTHER_SUFFIX))


def _backup(name: str) -> bool:
    """Whether ``name`` is an editor's backup or temporary file (``a.yaml~``, ``#a.yaml#``)."""
    return name.endswith(_BACKUP_ENDINGS) or (len(name) > 1 and name[0] == name[-1] == "#")

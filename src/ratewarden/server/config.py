"""Rate limit rules: envoyproxy/ratelimit YAML, unchanged, plus ratewarden's extensions.

``load(["rules/"])`` reads files and directories (the ``*.yaml`` and ``*.yml``
files of a directory, in name order, hidden names skipped) and returns a frozen
``RateLimitConfig``, or raises ``ConfigError`` listing every problem it found as
``file:line: key: what is wrong and what to do``. docs/config.md documents every
key.

The module is the public face of three parts: the rule model and the error types
(``server/_config_model.py``, where matching is described), the YAML reader of one
file (``server/_config_reader.py``, with a descriptor's ``rate_limit`` in
``server/_config_rate_limit.py``) and, here, loading files and directories.

This module is pure: no I/O beyond reading the given files, no clock, no store.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType

from ratewarden.errors import ConfigurationError as ConfigurationError  # noqa: PLC0414
from ratewarden.server._config_model import (
    ALGORITHM_NAMES,
    DEFAULT_ALGORITHM,
    DEFAULT_FAILURE_MODE,
    FAILURE_MODES,
    UNIT_NAMES,
    ConfigError,
    ConfigProblem,
    DomainConfig,
    Level,
    Limit,
    Match,
    Node,
    RateLimitConfig,
    Rule,
)

# Re-exported beside __all__, as it was here before the split: tests read
# config.MAX_ALIAS_COPIES (and config.ConfigurationError, imported above).
from ratewarden.server._config_reader import MAX_ALIAS_COPIES as MAX_ALIAS_COPIES  # noqa: PLC0414
from ratewarden.server._config_reader import _FileReader

__all__ = [
    "ALGORITHM_NAMES",
    "DEFAULT_ALGORITHM",
    "DEFAULT_FAILURE_MODE",
    "FAILURE_MODES",
    "ConfigError",
    "ConfigProblem",
    "DomainConfig",
    "Level",
    "Limit",
    "Match",
    "Node",
    "RateLimitConfig",
    "Rule",
    "UNIT_NAMES",
    "load",
    "loads",
]

_YAML_SUFFIXES = (".yaml", ".yml")


def load(paths: Sequence[str | Path] | str | Path) -> RateLimitConfig:
    """Load config files and directories; raise ``ConfigError`` with every problem."""
    if isinstance(paths, str | Path):
        paths = [paths]
    problems: list[ConfigProblem] = []
    files: list[tuple[str, str]] = []
    if not paths:
        raise ConfigError(
            [ConfigProblem("<config>", 0, "paths", "no config file or directory given")]
        )
    for path in map(Path, paths):
        for file in _files(path, problems):
            try:
                files.append((str(file), file.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as exc:
                problems.append(ConfigProblem(str(file), 0, "file", f"cannot read it: {exc}"))
    return _build(files, problems)


def loads(text: str, name: str = "<string>") -> RateLimitConfig:
    """Load one config document from a string (``name`` appears in errors)."""
    return _build([(name, text)], [])


def _files(path: Path, problems: list[ConfigProblem]) -> list[Path]:
    if path.is_dir():
        found = sorted(
            entry
            for entry in path.iterdir()
            if entry.suffix in _YAML_SUFFIXES and not entry.name.startswith(".") and entry.is_file()
        )
        if not found:
            problems.append(
                ConfigProblem(str(path), 0, "directory", "holds no *.yaml or *.yml file")
            )
        return found
    if not path.exists():
        problems.append(ConfigProblem(str(path), 0, "path", "does not exist"))
        return []
    return [path]


def _build(files: Sequence[tuple[str, str]], problems: list[ConfigProblem]) -> RateLimitConfig:
    domains: dict[str, DomainConfig] = {}
    for name, text in files:
        first = len(problems)
        domain = _FileReader(name, problems).read(text)
        previous = None if domain is None else domains.get(domain.name)
        if domain is not None and previous is not None:
            line = int(domain.source.rsplit(":", 1)[1])
            problems.append(
                ConfigProblem(
                    name,
                    line,
                    "domain",
                    f"duplicate domain {domain.name!r}, already defined at {previous.source}; "
                    "merge the two files or rename one domain",
                )
            )
        elif domain is not None:
            domains[domain.name] = domain
        problems[first:] = sorted(problems[first:], key=lambda problem: problem.line)
    if problems:
        raise ConfigError(problems)
    return RateLimitConfig(MappingProxyType(domains), tuple(name for name, _ in files))

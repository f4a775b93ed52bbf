"""Loading rule files and directories into one frozen ``RateLimitConfig``: ``load``, ``loads``.

Each file is read by a ``FileReader`` (``reader.py``, ``read_document``); here the files of a
directory are found (``directory.py``: which ones ``--config-files`` says), read from
disk, and their domains put together, a domain
defined twice being a problem like any other, unless ``merge_domains`` is set
(envoyproxy/ratelimit's ``MERGE_DOMAIN_CONFIG``): then the later file's
descriptors join the domain's top level, in file order, and a descriptor both
files define is the problem. The problems of every file are raised together, as
one ``ConfigError``. A directory that holds no rule file adds no rule, and is no error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from ratewarden.errors import ConfigurationError
from ratewarden.server.config.directory import walk
from ratewarden.server.config.model import (
    DEFAULT_FAILURE_MODE,
    FAILURE_MODES,
    ConfigError,
    ConfigProblem,
)
from ratewarden.server.config.reader import FileReader, read_document
from ratewarden.server.config.tree import DomainConfig, Level, Node, RateLimitConfig

log = logging.getLogger("ratewarden.server.config")

__all__ = ["load", "load_documents", "loads"]


def load(
    paths: Sequence[str | Path] | str | Path,
    *,
    merge_domains: bool = False,
    files: str = "yaml",
    default_failure_mode: str = DEFAULT_FAILURE_MODE,
) -> RateLimitConfig:
    """Load config files and directories; raise ``ConfigError`` with every problem.

    ``merge_domains``: a domain several files name is one domain with the
    descriptors of all of them (otherwise the second file is a problem).
    ``files``: what a directory contributes (``--config-files``): ``"yaml"``, its own
    ``*.yaml`` and ``*.yml`` files, or ``"all"``, every file in it and its
    subdirectories, as envoyproxy/ratelimit reads its runtime directory. Hidden names
    are never read (``directory.py``).
    ``default_failure_mode``: the ``failure_mode`` of every rule that sets none
    (``serve --failure-mode``); a ``budget`` takes it too, but for ``local``, which
    a budget cannot have: it stays ``open``.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    problems: list[ConfigProblem] = []
    documents: list[tuple[str, str]] = []
    if not paths:
        raise ConfigError(
            [ConfigProblem("<config>", 0, "paths", "no config file or directory given")]
        )
    given: dict[Path, Path] = {}  # resolved -> the path as first given
    for path in map(Path, paths):
        for file in _files(path, problems, files):
            if _given_twice(file, given, problems):
                continue
            try:
                documents.append((str(file), file.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as exc:
                problems.append(ConfigProblem(str(file), 0, "file", f"cannot read it: {exc}"))
    return _build(documents, problems, merge_domains, failure_mode=default_failure_mode)


def loads(text: str, name: str = "<string>") -> RateLimitConfig:
    """Load one config document from a string (``name`` appears in errors)."""
    return _build([(name, text)], [])


def load_documents(
    documents: Sequence[tuple[str, str]],
    *,
    merge_domains: bool = False,
    unit: str = "file",
    default_failure_mode: str = DEFAULT_FAILURE_MODE,
) -> RateLimitConfig:
    """Load ``(name, text)`` documents as the files of one directory, in order: what ``load``
    does after reading the files (rules from xDS come this way, named ``xds:<resource>``,
    ``unit`` ``"resource"``: what the messages call a document)."""
    return _build(documents, [], merge_domains, unit, default_failure_mode)


def _given_twice(file: Path, given: dict[Path, Path], problems: list[ConfigProblem]) -> bool:
    """Whether ``file`` is one already read (the same file once resolved): a problem, said
    as such, rather than its domain defined twice."""
    resolved = file.resolve()
    first = given.setdefault(resolved, file)
    if first is file:
        return False
    same = "" if str(first) == str(file) else f" as {str(first)!r} (both are {resolved})"
    problems.append(
        ConfigProblem(
            str(file),
            0,
            "file",
            f"given twice{same}: it is read once; name each file or directory once",
        )
    )
    return True


def _files(path: Path, problems: list[ConfigProblem], files: str) -> list[Path]:
    if path.is_dir():
        listing = walk(path, files)
        for where, why in listing.errors:
            problems.append(ConfigProblem(str(where), 0, "directory", why))
        # One with no rule file adds none: an empty directory is an empty config, as
        # upstream loads an empty runtime directory (the server says so: reload.py).
        return list(listing.files)
    if not path.exists():
        problems.append(ConfigProblem(str(path), 0, "path", "does not exist"))
        return []
    return [path]


def _build(
    files: Sequence[tuple[str, str]],
    problems: list[ConfigProblem],
    merge_domains: bool = False,
    unit: str = "file",
    failure_mode: str = DEFAULT_FAILURE_MODE,
) -> RateLimitConfig:
    if failure_mode not in FAILURE_MODES:
        raise ConfigurationError(
            f"default failure_mode {failure_mode!r} must be one of {', '.join(FAILURE_MODES)}"
        )
    domains: dict[str, DomainConfig] = {}
    readers: list[tuple[str, FileReader]] = []  # (domain, its file's reader)
    for name, text in files:
        first = len(problems)
        domain, reader = read_document(name, text, problems, unit, failure_mode)
        if domain is not None:
            readers.append((domain.name, reader))
        previous = None if domain is None else domains.get(domain.name)
        if domain is not None and previous is not None and merge_domains:
            domains[domain.name] = _merged(previous, domain, name, problems, unit)
        elif domain is not None and previous is not None:
            line = int(domain.source.rsplit(":", 1)[1])
            problems.append(
                ConfigProblem(
                    name,
                    line,
                    "domain",
                    f"duplicate domain {domain.name!r}, already defined at {previous.source}; "
                    f"merge the two {unit}s, rename one domain, or start with --merge-domains",
                )
            )
        elif domain is not None:
            domains[domain.name] = domain
        problems[first:] = sorted(problems[first:], key=lambda problem: problem.line)
    if not problems:
        _check_replaces(domains, readers)
    if problems:
        raise ConfigError(problems)
    _warn_replace_cycles(domains)
    return RateLimitConfig(MappingProxyType(domains), tuple(name for name, _ in files))


def _check_replaces(
    domains: Mapping[str, DomainConfig], readers: Sequence[tuple[str, FileReader]]
) -> None:
    """Each ``replaces`` name must be a rule's ``name`` in its domain (every file of it,
    when merged): upstream ignores one that is not, so a typo never replaces anything."""
    for domain, reader in readers:
        named = {rule.name for rule in domains[domain].rules if rule.name}
        for name, node in reader.replaced:
            if name not in named:
                known = ", ".join(repr(each) for each in sorted(named)[:10]) or "none"
                reader.problem(
                    node,
                    "replaces",
                    f"no rule of domain {domain!r} is named {name!r} (rule names: {known}); "
                    "give a rule's rate_limit name (check the spelling)",
                )


def _warn_replace_cycles(domains: Mapping[str, DomainConfig]) -> None:
    """Say which rules replace one another in a ring (A replaces B, B replaces A, or longer):
    a request that matches them all is held to none of them, since every name a matched rule
    replaces is dropped, the replacing rules' own included (as upstream drops them). Loads."""
    for domain in domains.values():
        replaced: dict[str, set[str]] = {}
        for rule in domain.rules:
            if rule.name and rule.replaces:
                replaced.setdefault(rule.name, set()).update(rule.replaces)
        ring = sorted(name for name in replaced if _reaches(replaced, name, name))
        if ring:
            log.warning(
                "rules of domain %r replace one another (%s): a request that matches them all "
                "is held to none of them",
                domain.name,
                ", ".join(ring),
                extra={"event": "config_replaces_cycle", "domain": domain.name, "rules": ring},
            )


def _reaches(replaced: Mapping[str, set[str]], start: str, goal: str) -> bool:
    """Whether following ``replaces`` from ``start`` comes to ``goal``."""
    seen: set[str] = set()
    todo = list(replaced.get(start, ()))
    while todo:
        name = todo.pop()
        if name == goal:
            return True
        if name not in seen:
            seen.add(name)
            todo.extend(replaced.get(name, ()))
    return False


def _merged(
    first: DomainConfig, second: DomainConfig, name: str, problems: list[ConfigProblem], unit: str
) -> DomainConfig:
    """``first`` with ``second``'s top-level descriptors after its own (MERGE_DOMAIN_CONFIG).

    A descriptor (key and value) both define is a problem, as it is within one file, and
    so are two that spell the same stats key (``key_value``).
    """
    seen = {_shown(node): node for node in first.root.nodes}
    nodes: list[Node] = list(first.root.nodes)
    for node in second.root.nodes:
        shown = _shown(node)
        before = seen.get(shown)
        if before is not None:
            line = int(node.source.rsplit(":", 1)[1]) if ":" in node.source else 0
            if (before.key, before.value) == (node.key, node.value):
                what = "duplicate descriptor"
                advice = f"keep it in one {unit}"
            else:
                what = "a descriptor with the same stats key as"
                advice = "rename one of the keys"
            problems.append(
                ConfigProblem(
                    name,
                    line,
                    "key",
                    f"{what} '{second.name}.{shown}' in the merged domain "
                    f"(first at {before.source}); {advice}",
                )
            )
            continue
        seen[shown] = node
        nodes.append(node)
    root = Level.of(nodes)
    # With a duplicate the whole load fails, so what the tree keeps then does not matter.
    return DomainConfig(first.name, first.source, root, first.rules + second.rules)


def _shown(node: Node) -> str:
    """The node's part of a stats key: ``key_value``, or ``key`` alone."""
    return f"{node.key}_{node.value}" if node.value else node.key

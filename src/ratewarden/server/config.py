"""Rate limit rules: envoyproxy/ratelimit YAML, unchanged, plus ratewarden's extensions.

``load(["rules/"])`` reads files and directories (the ``*.yaml`` and ``*.yml``
files of a directory, in name order, hidden names skipped) and returns a frozen
``RateLimitConfig``, or raises ``ConfigError`` listing every problem it found as
``file:line: key: what is wrong and what to do``. docs/config.md documents every
key.

Matching (``DomainConfig.match``) follows envoyproxy/ratelimit: at each level the
node with the exact key and value, else the first wildcard value of that key in
config order, else the key-only node. The rule that applies is the one on the
node reached by the request's *last* entry, never a parent's; a request that
goes deeper than the config, or ends on a node without a rule, has no rule.

This module is pure: no I/O beyond reading the given files, no clock, no store.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]

from ratewarden import algorithms
from ratewarden.errors import ConfigurationError
from ratewarden.rate import UNITS, Rate

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

#: The units envoyproxy/ratelimit accepts (any case), in the order of the proto enum.
UNIT_NAMES = ("second", "minute", "hour", "day", "week", "month", "year")
#: Every algorithm name ratewarden defines; ``algorithms.ALGORITHMS`` says which are built.
ALGORITHM_NAMES = (
    "fixed_window",
    "gcra",
    "leaky_bucket",
    "sliding_log",
    "sliding_window",
    "token_bucket",
)
#: What a rule does when the store is down: allow, deny, or decide in this process.
FAILURE_MODES = ("open", "closed", "local")
#: envoyproxy/ratelimit's only algorithm, so that existing configs behave as before.
DEFAULT_ALGORITHM = "fixed_window"
#: Envoy's own default (``failure_mode_deny: false``) lets requests through.
DEFAULT_FAILURE_MODE = "open"

_UINT32_MAX = 2**32 - 1
_YAML_SUFFIXES = (".yaml", ".yml")


# ---------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with a config: where (file, 1-based line, key) and what to do."""

    file: str
    line: int
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.key}: {self.message}"


class ConfigError(ConfigurationError):
    """The config did not load; ``errors`` lists every problem found, in file order."""

    def __init__(self, errors: Sequence[ConfigProblem]) -> None:
        self.errors: tuple[ConfigProblem, ...] = tuple(errors)
        lines = [str(problem) for problem in self.errors]
        if len(lines) == 1:
            message = lines[0]
        else:
            message = f"{len(lines)} problems in the rate limit config:\n" + "\n".join(lines)
        super().__init__(message)


# ---------------------------------------------------------------- rules


@dataclass(frozen=True, slots=True)
class Limit:
    """``requests_per_unit`` per ``unit_multiplier`` x ``unit``, with an optional burst.

    ``rate`` is the ``Rate`` a store counts; it is None when ``requests_per_unit``
    is 0, which envoyproxy/ratelimit treats as "always over the limit".
    """

    requests_per_unit: int
    unit: str
    unit_multiplier: int = 1
    burst: int | None = None
    rate: Rate | None = field(default=None, repr=False, compare=False)

    @property
    def period_us(self) -> int:
        return UNITS[self.unit] * self.unit_multiplier

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"unit": self.unit, "requests_per_unit": self.requests_per_unit}
        if self.unit_multiplier != 1:
            out["unit_multiplier"] = self.unit_multiplier
        if self.burst is not None:
            out["burst"] = self.burst
        return out

    def __str__(self) -> str:
        unit = self.unit if self.unit_multiplier == 1 else f"{self.unit_multiplier} x {self.unit}"
        text = f"{self.requests_per_unit}/{unit}"
        return text if self.burst is None else f"{text} (burst {self.burst})"


@dataclass(frozen=True, slots=True)
class Rule:
    """The ``rate_limit`` of one descriptor node, with its node's flags.

    ``path`` is envoyproxy/ratelimit's key for the rule (``domain.key_value.key``),
    used in metrics and in ``describe()``; ``source`` is ``file:line``.
    ``limits`` is empty only for an ``unlimited`` rule. ``budget`` marks a
    descriptor's ``budget`` (a token budget, ``server/_budget_config.py``): one
    GCRA limit whose hits are tokens, checked on hits 0 and charged otherwise.
    """

    domain: str
    path: str
    source: str
    limits: tuple[Limit, ...]
    unlimited: bool = False
    name: str = ""
    replaces: tuple[str, ...] = ()
    algorithm: str = DEFAULT_ALGORITHM
    failure_mode: str = DEFAULT_FAILURE_MODE
    shadow_mode: bool = False
    quota_mode: bool = False
    detailed_metric: bool = False
    budget: bool = False

    @property
    def always_over(self) -> bool:
        """A limit of 0 requests: every request is over, without asking a store."""
        return any(limit.rate is None for limit in self.limits)

    @property
    def rates(self) -> tuple[Rate, ...]:
        return tuple(limit.rate for limit in self.limits if limit.rate is not None)

    def limit_for(self, rate: Rate | None) -> Limit | None:
        """The configured ``Limit`` whose rate is ``rate`` (the binding one of a decision)."""
        for limit in self.limits:
            if limit.rate == rate:
                return limit
        return self.limits[0] if self.limits else None

    def to_dict(self) -> dict[str, Any]:
        """The ``rate_limit`` (or ``budget``) block, normalised (loadable YAML)."""
        if self.budget:
            from ratewarden.server._budget_config import budget_dict  # it imports this module

            return budget_dict(self)
        out: dict[str, Any] = {}
        if self.name:
            out["name"] = self.name
        if self.replaces:
            out["replaces"] = [{"name": name} for name in self.replaces]
        if self.unlimited:
            out["unlimited"] = True
            return out
        if self.algorithm != DEFAULT_ALGORITHM:
            out["algorithm"] = self.algorithm
        if self.failure_mode != DEFAULT_FAILURE_MODE:
            out["failure_mode"] = self.failure_mode
        if len(self.limits) == 1:
            out.update(self.limits[0].to_dict())
        else:
            out["limits"] = [limit.to_dict() for limit in self.limits]
        return out

    def describe(self) -> str:
        if self.unlimited:
            what = "unlimited"
        else:
            what = ", ".join(str(limit) for limit in self.limits)
            what += f" algorithm={self.algorithm} failure_mode={self.failure_mode}"
        flags = [
            flag
            for flag, on in (
                ("shadow_mode", self.shadow_mode),
                ("quota_mode", self.quota_mode),
                ("detailed_metric", self.detailed_metric),
                ("budget", self.budget),
            )
            if on
        ]
        if self.name:
            flags.append(f"name={self.name}")
        if self.replaces:
            flags.append("replaces=" + ",".join(self.replaces))
        tail = f" [{' '.join(flags)}]" if flags else ""
        return f"{self.path}: {what}{tail}  ({self.source})"


@dataclass(frozen=True, slots=True)
class Level:
    """The descriptor nodes at one depth, indexed the way matching reads them."""

    exact: Mapping[tuple[str, str], Node] = field(default_factory=lambda: MappingProxyType({}))
    wildcards: Mapping[str, tuple[Node, ...]] = field(default_factory=lambda: MappingProxyType({}))
    keys: Mapping[str, Node] = field(default_factory=lambda: MappingProxyType({}))
    nodes: tuple[Node, ...] = ()

    def match(self, key: str, value: str) -> Node | None:
        """Exact key+value, else the first matching wildcard of ``key``, else key-only."""
        node = self.exact.get((key, value))
        if node is not None:
            return node
        for candidate in self.wildcards.get(key, ()):
            assert candidate.pattern is not None
            if candidate.pattern.fullmatch(value):
                return candidate
        return self.keys.get(key)

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)


@dataclass(frozen=True, slots=True)
class Node:
    """One ``descriptors`` entry: its key and value, its rule and its children.

    ``value`` is "" for a key-only node; ``pattern`` is set for a value with ``*``.
    ``share_threshold`` makes every request value this node matches (key-only or
    wildcard) count against one counter; ``value_to_metric`` puts the request's
    value in the metric key.
    """

    key: str
    value: str
    rule: Rule | None
    children: Level = field(repr=False)
    source: str = ""
    pattern: re.Pattern[str] | None = field(default=None, repr=False, compare=False)
    share_threshold: bool = False
    value_to_metric: bool = False
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def exact(self) -> bool:
        """True when the node names one value (not key-only, not a wildcard)."""
        return bool(self.value) and self.pattern is None

    def metadata_dict(self) -> dict[str, Any]:
        """``metadata`` as plain dicts and lists (for a protobuf Struct or JSON)."""
        thawed: dict[str, Any] = _thaw(self.metadata)
        return thawed

    def to_dict(self) -> dict[str, Any]:
        """This node as loadable YAML, normalised."""
        out: dict[str, Any] = {"key": self.key}
        if self.value:
            out["value"] = self.value
        if self.rule is not None:
            out["budget" if self.rule.budget else "rate_limit"] = self.rule.to_dict()
            for flag in ("shadow_mode", "quota_mode", "detailed_metric"):
                if getattr(self.rule, flag):
                    out[flag] = True
        if self.share_threshold:
            out["share_threshold"] = True
        if self.value_to_metric:
            out["value_to_metric"] = True
        if self.metadata:
            out["metadata"] = _thaw(self.metadata)
        if self.children:
            out["descriptors"] = [child.to_dict() for child in self.children]
        return out


@dataclass(frozen=True, slots=True)
class Match:
    """Where one request descriptor landed: one node per request entry, the last one deciding."""

    nodes: tuple[Node, ...]

    @property
    def node(self) -> Node:
        return self.nodes[-1]

    @property
    def rule(self) -> Rule | None:
        return self.nodes[-1].rule


@dataclass(frozen=True, slots=True)
class DomainConfig:
    """One ``domain``: its descriptor tree and its rules in config order."""

    name: str
    source: str
    root: Level
    rules: tuple[Rule, ...]

    def match(self, entries: Sequence[tuple[str, str]]) -> Match | None:
        """The nodes a request descriptor's ``(key, value)`` entries reach, or None."""
        level = self.root
        nodes: list[Node] = []
        for index, (key, value) in enumerate(entries):
            node = level.match(key, value)
            if node is None:
                return None
            nodes.append(node)
            if index == len(entries) - 1:
                return Match(tuple(nodes))
            if not node.children:
                # The request goes deeper than the config: no rule, and no fallback
                # to this node's limit (envoyproxy/ratelimit does the same).
                return None
            level = node.children
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"domain": self.name, "descriptors": [node.to_dict() for node in self.root]}


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    """Every loaded domain. Frozen: a reload builds a new one and swaps it in whole."""

    domains: Mapping[str, DomainConfig]
    files: tuple[str, ...] = ()

    def match(self, domain: str, entries: Sequence[tuple[str, str]]) -> Match | None:
        found = self.domains.get(domain)
        return None if found is None else found.match(entries)

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(rule for domain in self.domains.values() for rule in domain.rules)

    def describe(self) -> str:
        """One line per rule, in load order: what ``/rlconfig`` shows."""
        lines = [rule.describe() for rule in self.rules]
        return "\n".join(lines) + ("\n" if lines else "")

    def to_dict(self) -> dict[str, Any]:
        """``{"domains": [...]}``; each domain entry is itself a loadable config file."""
        return {"domains": [domain.to_dict() for domain in self.domains.values()]}


# ---------------------------------------------------------------- loading


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


_ROOT_KEYS = ("domain", "descriptors")
_DESCRIPTOR_KEYS = (
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    "budget",
)
_RATE_LIMIT_KEYS = (
    "unit",
    "requests_per_unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "burst",
    "unit_multiplier",
    "failure_mode",
    "limits",
)
_LIMIT_KEYS = ("unit", "requests_per_unit", "unit_multiplier", "burst")
_MISPLACED = {
    "domain": "the top level of the file",
    **{key: "the descriptor (next to rate_limit)" for key in _DESCRIPTOR_KEYS},
    **{key: "rate_limit" for key in _RATE_LIMIT_KEYS},
    "tokens_per_unit": "budget",
}

#: Entries of a YAML mapping: key text -> (key node, value node).
_Entries = dict[str, tuple[Any, Any]]

#: Descriptors a file may add by repeating an alias (``descriptors: *shared``). Each
#: alias copies its whole subtree, so a few lines that alias each other in a chain
#: expand exponentially; past this many copies the file is refused, not expanded.
MAX_ALIAS_COPIES = 10_000

# What SafeConstructor raises, besides MarkedYAMLError, for a tagged scalar whose
# text does not fit its tag: `!!int abc`, `!!bool maybe`, `!!timestamp 2020-13-45`,
# and an int longer than Python converts (4,300 digits).
_CONSTRUCT_ERRORS = (yaml.MarkedYAMLError, ValueError, KeyError, TypeError, OverflowError)


def _first_of_each_key(pairs: list[Any]) -> list[Any]:
    """The pairs whose key has not appeared before (a merge's first source wins)."""
    seen: set[object] = set()
    kept = []
    for key_node, value_node in pairs:
        key = (
            (key_node.tag, key_node.value)
            if isinstance(key_node, yaml.ScalarNode)
            else id(key_node)
        )
        if key not in seen:
            seen.add(key)
            kept.append((key_node, value_node))
    return kept


def _shorten(text: str, most: int = 40) -> str:
    return repr(text) if len(text) <= most else f"{text[:most]!r}... ({len(text)} characters)"


class _FileReader:
    """Turns one file's YAML node tree into a DomainConfig, recording every problem."""

    def __init__(self, name: str, problems: list[ConfigProblem]) -> None:
        self.name = name
        self.problems = problems
        self.constructor = yaml.constructor.SafeConstructor()
        self.rules: list[Rule] = []
        # Descriptor lists being read (an alias back to one is a cycle) and descriptor
        # nodes already read once (a second visit is an alias copy, see MAX_ALIAS_COPIES).
        self.open_lists: set[int] = set()
        self.merges: dict[int, tuple[list[Any], list[Any]]] = {}
        self.seen_items: set[int] = set()
        self.copies = 0

    # -- plumbing

    def problem(self, node: Any, key: str, message: str) -> None:
        line = node.start_mark.line + 1 if node is not None else 0
        self.problems.append(ConfigProblem(self.name, line, key, message))

    def where(self, node: Any) -> str:
        return f"{self.name}:{node.start_mark.line + 1}"

    def mapping(self, node: Any, what: str, allowed: Sequence[str]) -> _Entries | None:
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, what, f"must be a mapping of keys ({', '.join(allowed)})")
            return None
        own, merged = self.merge(node, what)
        entries: _Entries = {}
        for key_node, value_node in own:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                self.problem(key_node, str(getattr(key_node, "value", "?")), "keys must be strings")
                continue
            key = key_node.value
            if key in entries:
                first = entries[key][0].start_mark.line + 1
                self.problem(key_node, key, f"appears twice in one mapping (first on line {first})")
            elif key not in allowed:
                self.problem(key_node, key, self._unknown(key, what, allowed))
            else:
                entries[key] = (key_node, value_node)
        for key_node, value_node in merged:
            key = str(getattr(key_node, "value", ""))
            if key not in allowed:
                self.problem(key_node, key, self._unknown(key, what, allowed) + " (merged with <<)")
            elif key not in entries:
                entries[key] = (key_node, value_node)
        return entries

    def merge(
        self, node: Any, what: str, within: frozenset[int] = frozenset()
    ) -> tuple[list[Any], list[Any]]:
        """Split a mapping into its own pairs and those merged in with ``<<`` (yaml.v2 does
        merges too). Own keys win over merged ones; the first merged mapping wins among them.
        ``within`` holds the mappings whose merges are being followed: meeting one again is
        a cycle (``<<: *self`` inside its own anchor), refused rather than followed.
        Each mapping is split once and only the first pair of each merged key is kept, so
        chains of aliases merging aliases stay linear instead of doubling at each link."""
        done = self.merges.get(id(node))
        if done is not None:
            return done
        within = within | {id(node)}
        own: list[Any] = []
        merged: list[Any] = []
        for key_node, value_node in node.value:
            if key_node.tag != "tag:yaml.org,2002:merge":
                own.append((key_node, value_node))
                continue
            sources = (
                value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            )
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    self.problem(
                        source, "<<", f"in {what} must merge a mapping (an alias like *name)"
                    )
                    continue
                if id(source) in within:
                    self.problem(
                        source, "<<", f"in {what} merges a mapping into itself (a cycle of aliases)"
                    )
                    continue
                source_own, source_merged = self.merge(source, what, within)
                merged.extend(source_own + source_merged)
        self.merges[id(node)] = own, _first_of_each_key(merged)
        return self.merges[id(node)]

    @staticmethod
    def _unknown(key: str, what: str, allowed: Sequence[str]) -> str:
        home = _MISPLACED.get(key)
        if home is not None:
            return f"unknown key in {what}; {key!r} belongs in {home}"
        return f"unknown key in {what}; allowed here: {', '.join(allowed)}"

    def scalar(self, entries: _Entries, key: str) -> tuple[Any, Any] | None:
        """``(node, python value)`` of a scalar entry, or None when absent or null."""
        if key not in entries:
            return None
        node = entries[key][1]
        if not isinstance(node, yaml.ScalarNode):
            self.problem(node, key, "must be a single value, not a list or mapping")
            return None
        try:
            value = self.constructor.construct_object(node)
        except _CONSTRUCT_ERRORS as exc:
            self.problem(node, key, self._unreadable(node, exc))
            return None
        return None if value is None else (node, value)

    @staticmethod
    def _unreadable(node: Any, exc: Exception) -> str:
        if isinstance(exc, yaml.MarkedYAMLError):
            return f"cannot be read: {exc.problem}"
        tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
        reason = str(exc)
        detail = f" ({reason})" if len(reason) <= 80 else ""
        return f"cannot be read: {_shorten(str(node.value))} is not a valid {tag}{detail}"

    def text(self, entries: _Entries, key: str) -> tuple[Any, str] | None:
        found = self.scalar(entries, key)
        if found is None:
            return None
        node, _ = found
        # The source text, as yaml.v2 reads it into a string field: `value: 007` stays "007".
        return node, str(node.value)

    def flag(self, entries: _Entries, key: str) -> bool:
        found = self.scalar(entries, key)
        if found is None:
            return False
        node, value = found
        if not isinstance(value, bool):
            self.problem(node, key, f"must be true or false, not {node.value!r}")
            return False
        return value

    def integer(self, entries: _Entries, key: str, low: int, high: int) -> tuple[Any, int] | None:
        found = self.scalar(entries, key)
        if found is None:
            return None
        node, value = found
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(node, key, f"must be a whole number, not {node.value!r}")
            return None
        if not low <= value <= high:
            self.problem(node, key, f"{value} is out of range; use {low} to {high}")
            return None
        return node, value

    def sequence(self, node: Any, key: str) -> list[Any]:
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
            return []
        if not isinstance(node, yaml.SequenceNode):
            self.problem(node, key, "must be a list (each item starting with '- ')")
            return []
        return list(node.value)

    # -- the schema

    def read(self, text: str) -> DomainConfig | None:
        """The file's DomainConfig, or None with its problems recorded."""
        root = self.compose(text)
        if root is None:
            return None
        try:
            return self.schema(root)
        except RecursionError:
            # Descriptors nested deeper than Python's stack: refused, not a crash.
            self.problems.append(
                ConfigProblem(self.name, 1, "descriptors", "nested too deeply to read")
            )
            return None

    def compose(self, text: str) -> Any:
        """The YAML node tree, or None (an empty file, or a YAML error recorded)."""
        try:
            loader = yaml.SafeLoader(text)
        except yaml.reader.ReaderError as exc:
            self.unreadable(text, exc)
            return None
        try:
            root = loader.get_single_node()
        except yaml.reader.ReaderError as exc:
            self.unreadable(text, exc)
            return None
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else 0
            self.problems.append(
                ConfigProblem(self.name, line, "yaml", f"not valid YAML: {exc.problem}")
            )
            return None
        except RecursionError:
            line = min(loader.line + 1, text.count("\n") + 1)
            self.problems.append(
                ConfigProblem(self.name, line, "yaml", "not readable: nested too deeply")
            )
            return None
        finally:
            loader.dispose()
        if root is None:
            self.problems.append(
                ConfigProblem(
                    self.name, 1, "domain", "the file is empty; it needs domain: and descriptors:"
                )
            )
        return root

    def unreadable(self, text: str, exc: yaml.reader.ReaderError) -> None:
        """A character YAML refuses (a control character, a lone surrogate)."""
        line = text.count("\n", 0, exc.position) + 1
        self.problems.append(
            ConfigProblem(
                self.name,
                line,
                "yaml",
                f"not valid YAML: character {chr(exc.character)!r} ({exc.character:#x}) is not "
                "allowed in a YAML file; remove it or write it as an escape in a quoted string",
            )
        )

    def schema(self, root: Any) -> DomainConfig | None:
        """Check the node tree against the config's keys and build the DomainConfig."""
        entries = self.mapping(root, "the top level", _ROOT_KEYS)
        if entries is None:
            return None
        found = self.text(entries, "domain")
        if found is None or not found[1]:
            node = entries["domain"][0] if "domain" in entries else root
            self.problem(node, "domain", "is missing or empty; every config file names its domain")
            return None
        domain_node, domain = found
        level = self.level(entries.get("descriptors", (None, None))[1], domain, domain)
        return DomainConfig(domain, self.where(domain_node), level, tuple(self.rules))

    def level(self, node: Any, domain: str, parent: str) -> Level:
        if node is None:
            return Level()
        if id(node) in self.open_lists:
            self.problem(
                node,
                "descriptors",
                "lists itself through an alias (a cycle); "
                "a descriptor cannot contain its own parent list",
            )
            return Level()
        self.open_lists.add(id(node))
        try:
            return self.level_of(node, domain, parent)
        finally:
            self.open_lists.discard(id(node))

    def level_of(self, node: Any, domain: str, parent: str) -> Level:
        exact: dict[tuple[str, str], Node] = {}
        wildcards: dict[str, list[Node]] = {}
        keys: dict[str, Node] = {}
        seen: dict[tuple[str, str], str] = {}
        nodes: list[Node] = []
        for item in self.sequence(node, "descriptors"):
            built = self.descriptor(item, domain, parent)
            if built is None:
                continue
            ident = (built.key, built.value)
            if ident in seen:
                composite = f"{parent}.{_path_part(built.key, built.value)}"
                self.problem(
                    item,
                    "key",
                    f"duplicate descriptor {composite!r} at this level (first at {seen[ident]}); "
                    "merge the two entries",
                )
                continue
            seen[ident] = built.source
            nodes.append(built)
            if built.pattern is not None:
                wildcards.setdefault(built.key, []).append(built)
            elif built.value:
                exact[ident] = built
            else:
                keys[built.key] = built
        return Level(
            MappingProxyType(exact),
            MappingProxyType({key: tuple(found) for key, found in wildcards.items()}),
            MappingProxyType(keys),
            tuple(nodes),
        )

    def descriptor(self, item: Any, domain: str, parent: str) -> Node | None:
        if id(item) in self.seen_items:
            self.copies += 1
            if self.copies == MAX_ALIAS_COPIES + 1:
                self.problem(
                    item,
                    "descriptors",
                    f"aliases copy more than {MAX_ALIAS_COPIES} descriptors; write the "
                    "descriptors out or alias fewer of them",
                )
            if self.copies > MAX_ALIAS_COPIES:
                return None
        self.seen_items.add(id(item))
        entries = self.mapping(item, "a descriptor", _DESCRIPTOR_KEYS)
        if entries is None:
            return None
        found_key = self.text(entries, "key")
        key_missing = found_key is None or not found_key[1]
        if key_missing:
            node = entries["key"][0] if "key" in entries else item
            self.problem(node, "key", "is missing or empty; every descriptor needs a key")
        found_value = self.text(entries, "value")
        key = "" if found_key is None else found_key[1]
        value = "" if found_value is None else found_value[1]
        path = f"{parent}.{_path_part(key, value)}"
        rule = None
        shadow_mode = self.flag(entries, "shadow_mode")
        quota_mode = self.flag(entries, "quota_mode")
        detailed_metric = self.flag(entries, "detailed_metric")
        if "rate_limit" in entries:
            rule = self.rate_limit(
                entries["rate_limit"],
                domain=domain,
                path=path,
                shadow_mode=shadow_mode,
                quota_mode=quota_mode,
                detailed_metric=detailed_metric,
            )
        if "budget" in entries:
            from ratewarden.server._budget_config import read_budget  # it imports this module

            rule = read_budget(
                self,
                entries,
                domain=domain,
                path=path,
                shadow_mode=shadow_mode,
                quota_mode=quota_mode,
                detailed_metric=detailed_metric,
            )
        share_threshold = self.flag(entries, "share_threshold")
        value_to_metric = self.flag(entries, "value_to_metric")
        metadata: Mapping[str, Any] = MappingProxyType({})
        if "metadata" in entries:
            metadata = self.metadata(entries["metadata"][1])
        children = self.level(entries.get("descriptors", (None, None))[1], domain, path)
        if key_missing:
            return None
        pattern = _wildcard(value) if "*" in value else None
        return Node(
            key=key,
            value=value,
            rule=rule,
            children=children,
            source=self.where(item),
            pattern=pattern,
            share_threshold=share_threshold,
            value_to_metric=value_to_metric,
            metadata=metadata,
        )

    def rate_limit(
        self,
        pair: tuple[Any, Any],
        *,
        domain: str,
        path: str,
        shadow_mode: bool,
        quota_mode: bool,
        detailed_metric: bool,
    ) -> Rule | None:
        key_node, node = pair
        entries = self.mapping(node, "rate_limit", _RATE_LIMIT_KEYS)
        if entries is None:
            return None
        before = len(self.problems)
        name_found = self.text(entries, "name")
        name = "" if name_found is None else name_found[1]
        replaces = self.replaces(entries, name)
        unlimited = self.flag(entries, "unlimited")
        algorithm = self.choice(entries, "algorithm", ALGORITHM_NAMES, DEFAULT_ALGORITHM)
        failure_mode = self.choice(entries, "failure_mode", FAILURE_MODES, DEFAULT_FAILURE_MODE)
        limits: tuple[Limit, ...] = ()
        if unlimited:
            self.check_unlimited(entries)
        elif "limits" in entries:
            for key in _LIMIT_KEYS:
                if key in entries:
                    self.problem(
                        entries[key][0],
                        key,
                        "goes inside each item of limits when limits is given, not beside it",
                    )
            items = self.sequence(entries["limits"][1], "limits")
            if not items:
                self.problem(entries["limits"][0], "limits", "is empty; give at least one limit")
            built = [self.limit(item, algorithm) for item in items]
            limits = tuple(limit for limit in built if limit is not None)
            self.check_distinct(entries["limits"][0], limits)
        else:
            single = self.limit_fields(entries, node, algorithm)
            limits = () if single is None else (single,)
        if len(self.problems) != before:
            return None
        rule = Rule(
            domain=domain,
            path=path,
            source=self.where(key_node),
            limits=limits,
            unlimited=unlimited,
            name=name,
            replaces=replaces,
            algorithm=algorithm,
            failure_mode=failure_mode,
            shadow_mode=shadow_mode,
            quota_mode=quota_mode,
            detailed_metric=detailed_metric,
        )
        self.rules.append(rule)
        return rule

    def check_unlimited(self, entries: _Entries) -> None:
        unit = self.text(entries, "unit")
        if unit is not None and unit[1]:
            self.problem(
                entries["unit"][0],
                "unit",
                "must not be given with unlimited: true; drop the unit (or unlimited)",
            )
        for key in ("limits", "burst", "unit_multiplier", "algorithm", "failure_mode"):
            if key in entries:
                self.problem(entries[key][0], key, "has no meaning with unlimited: true; drop it")

    def limit(self, item: Any, algorithm: str) -> Limit | None:
        entries = self.mapping(item, "a limits item", _LIMIT_KEYS)
        return None if entries is None else self.limit_fields(entries, item, algorithm)

    def limit_fields(self, entries: _Entries, node: Any, algorithm: str) -> Limit | None:
        before = len(self.problems)
        unit_found = self.text(entries, "unit")
        unit = None
        if unit_found is None:
            self.problem(node, "unit", f"is missing; use one of {', '.join(UNIT_NAMES)}")
        elif unit_found[1].lower() not in UNIT_NAMES:
            self.problem(
                unit_found[0],
                "unit",
                f"invalid rate limit unit {unit_found[1]!r}; use one of {', '.join(UNIT_NAMES)}",
            )
        else:
            unit = unit_found[1].lower()
        counted = len(self.problems)
        rpu = self.integer(entries, "requests_per_unit", 0, _UINT32_MAX)
        if rpu is None and len(self.problems) == counted:
            self.problem(
                node,
                "requests_per_unit",
                "is missing; give a whole number (0 blocks every request)",
            )
        multiplier = self.integer(entries, "unit_multiplier", 1, 1_000_000)
        burst = self.integer(entries, "burst", 1, _UINT32_MAX)
        if unit is None or rpu is None or len(self.problems) != before:
            return None
        limit = Limit(
            requests_per_unit=rpu[1],
            unit=unit,
            unit_multiplier=1 if multiplier is None else multiplier[1],
            burst=None if burst is None else burst[1],
        )
        rate = None
        if limit.requests_per_unit > 0:
            try:
                rate = Rate(
                    limit.requests_per_unit, timedelta(microseconds=limit.period_us), limit.burst
                )
                module = algorithms.ALGORITHMS.get(algorithm)
                if module is not None:
                    # The algorithm's own checks: window algorithms refuse a burst.
                    module.params(rate)
            except ConfigurationError as exc:
                blame = "burst" if burst is not None else "requests_per_unit"
                self.problem((burst or rpu)[0], blame, str(exc))
                return None
        elif burst is not None:
            self.problem(burst[0], "burst", "has no meaning with requests_per_unit: 0")
            return None
        return Limit(limit.requests_per_unit, unit, limit.unit_multiplier, limit.burst, rate)

    def check_distinct(self, node: Any, limits: tuple[Limit, ...]) -> None:
        periods: dict[int, Limit] = {}
        for limit in limits:
            if limit.period_us in periods:
                self.problem(
                    node,
                    "limits",
                    f"{periods[limit.period_us]} and {limit} count over the same period; "
                    "keep the stricter one",
                )
            periods[limit.period_us] = limit

    def choice(self, entries: _Entries, key: str, choices: Sequence[str], default: str) -> str:
        found = self.text(entries, key)
        if found is None:
            return default
        node, value = found
        if value not in choices:
            self.problem(node, key, f"unknown {key} {value!r}; use one of {', '.join(choices)}")
            return default
        if key == "algorithm" and value not in algorithms.ALGORITHMS:
            built = ", ".join(sorted(algorithms.ALGORITHMS))
            self.problem(node, key, f"{value!r} is not available in this build; use one of {built}")
        return value

    def replaces(self, entries: _Entries, name: str) -> tuple[str, ...]:
        if "replaces" not in entries:
            return ()
        names: list[str] = []
        for item in self.sequence(entries["replaces"][1], "replaces"):
            fields = self.mapping(item, "a replaces item", ("name",))
            if fields is None:
                continue
            found = self.text(fields, "name")
            if found is None or not found[1]:
                self.problem(
                    item, "replaces", "has an empty entry; give the name of the rule to replace"
                )
            elif found[1] == name:
                self.problem(
                    found[0],
                    "replaces",
                    f"names its own rule {name!r}; a rule cannot replace itself",
                )
            else:
                names.append(found[1])
        return tuple(names)

    def metadata(self, node: Any) -> Mapping[str, Any]:
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, "metadata", "must be a mapping of names to values")
            return MappingProxyType({})
        try:
            value = self.constructor.construct_object(node, deep=True)
        except _CONSTRUCT_ERRORS as exc:
            self.problem(node, "metadata", f"cannot be read: {getattr(exc, 'problem', exc)}")
            return MappingProxyType({})
        bad = _json_problem(value)
        if bad is not None:
            self.problem(node, "metadata", bad)
            return MappingProxyType({})
        frozen = _freeze(value)
        assert isinstance(frozen, Mapping)
        return frozen


def _path_part(key: str, value: str) -> str:
    return f"{key}_{value}" if value else key


def _wildcard(value: str) -> re.Pattern[str]:
    """``*`` matches zero or more characters, anywhere in the value; nothing else is special."""
    return re.compile(".*".join(re.escape(part) for part in value.split("*")), re.DOTALL)


def _json_problem(value: Any, where: str = "metadata") -> str | None:
    """Why ``value`` cannot become a protobuf Struct (JSON), or None when it can."""
    if value is None or isinstance(value, bool | int | float | str):
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _json_problem(item, f"{where}[{index}]")
            if found is not None:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} has a non-string key {key!r}; quote it"
            found = _json_problem(item, f"{where}.{key}")
            if found is not None:
                return found
        return None
    return (
        f"{where} holds {value!r}, which is not JSON (use strings, numbers, booleans, lists, maps)"
    )


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({key: _freeze(item) for key, item in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(item) for item in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value

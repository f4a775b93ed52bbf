"""Reads one rule file's YAML into a ``DomainConfig``, recording every problem as it goes.

``_FileReader`` composes the YAML node tree (yaml.v2's merges included, alias
copies capped), checks every mapping against the keys it allows and walks the
descriptors into ``Level``/``Node`` trees. A descriptor's ``rate_limit`` is read
by ``server/_config_rate_limit.py``, its ``budget`` by ``server/_budget_config.py``;
both use this reader's plumbing (``problem``, ``mapping``, ``text``, ``integer``...).
Each problem is ``file:line: key: what is wrong and what to do``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]

from ratewarden.server._budget_config import read_budget
from ratewarden.server._config_model import (
    ConfigProblem,
    DomainConfig,
    Level,
    Node,
    Rule,
    _freeze,
)
from ratewarden.server._config_rate_limit import _RATE_LIMIT_KEYS, read_rate_limit

__all__ = ["MAX_ALIAS_COPIES"]

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
            rule = read_rate_limit(
                self,
                entries["rate_limit"],
                domain=domain,
                path=path,
                shadow_mode=shadow_mode,
                quota_mode=quota_mode,
                detailed_metric=detailed_metric,
            )
        if "budget" in entries:
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

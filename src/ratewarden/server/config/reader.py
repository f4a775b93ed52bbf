"""Reads one rule file's YAML into a ``DomainConfig``: the file's schema, descriptor by descriptor.

``FileReader`` composes the YAML node tree (yaml.v2's merges included, alias
copies capped at ``MAX_ALIAS_COPIES``), checks the top level and every descriptor
against the keys they allow and walks the descriptors into ``Level``/``Node``
trees. Its plumbing (``problem``, ``mapping``, ``text``, ``integer``...) is
``FieldReader``'s (``fields.py``); a descriptor's ``rate_limit`` is read by
``rate_limit.py``, its ``budget`` by ``budget.py``, with the same plumbing. Each
problem is ``file:line: key: what is wrong and what to do``.

``read_document`` composes with libyaml (PyYAML's ``CSafeLoader``) where it is there,
about 3 times as fast (a reload of 10,000 rules holds the server's calls back while it
reads), and with PyYAML's own loader a file libyaml does not read, reads with a
problem, or that holds a character the two read differently (``PURE_ONLY``): which
files load, and every message and line, are PyYAML's own loader's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]

from ratewarden.server.config.budget import read_budget
from ratewarden.server.config.fields import FieldReader, _shorten
from ratewarden.server.config.metadata import ConstructError, read_metadata
from ratewarden.server.config.model import DEFAULT_FAILURE_MODE, ConfigProblem, DescriptorRule
from ratewarden.server.config.rate_limit import RATE_LIMIT_KEYS, read_rate_limit
from ratewarden.server.config.rlqs_weights import check_weighted, read_rlqs_weights
from ratewarden.server.config.tree import DomainConfig, Level, Node

__all__ = ["MAX_ALIAS_COPIES", "PURE_ONLY", "FileReader", "read_document"]

#: libyaml's loader, where PyYAML was built with it (its wheels are).
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", None)

#: Characters that libyaml and PyYAML's own scanner read differently: a tab, ``?`` or
#: ``!`` where PyYAML refuses them and libyaml does not (``domain\t: x``, ``{value: a?b}``,
#: a bare ``!``), and the line breaks ``\x85``, ``\u2028``, ``\u2029``, which shift the
#: lines libyaml gives. A file holding one (or a BOM past its start) is read by PyYAML's
#: own loader, so that which files load, and every message, never depends on libyaml.
PURE_ONLY = ("\t", "?", "!", "\x85", "\u2028", "\u2029")

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
    "rlqs_weights",
)
_MISPLACED = {
    "domain": "the top level of the file",
    **{key: "the descriptor (next to rate_limit)" for key in _DESCRIPTOR_KEYS},
    # The blocks themselves: "next to rate_limit" would send rate_limit beside itself.
    **{key: "a descriptor (an item of descriptors:)" for key in ("rate_limit", "budget")},
    **{key: "rate_limit" for key in RATE_LIMIT_KEYS},
    "tokens_per_unit": "budget",
}

#: Top-level keys of an Envoy bootstrap (the file ``envoy -c`` reads): a file with one of them
#: and no ``domain`` is said to be one, not reported key by key as a broken rule file.
_BOOTSTRAP_KEYS = frozenset(
    ("static_resources", "dynamic_resources", "admin", "node", "layered_runtime")
)

#: Descriptors a file may add by repeating an alias (``descriptors: *shared``). Each
#: alias copies its whole subtree, so a few lines that alias each other in a chain
#: expand exponentially; past this many copies the file is refused, not expanded.
MAX_ALIAS_COPIES = 10_000


class FileReader(FieldReader):
    """Turns one file's YAML node tree into a DomainConfig, recording every problem."""

    def __init__(
        self,
        name: str,
        problems: list[ConfigProblem],
        unit: str = "file",
        failure_mode: str = DEFAULT_FAILURE_MODE,
    ) -> None:
        super().__init__(name, problems, _MISPLACED)
        self.unit = unit  # what the text is, for the messages: "file" or "resource" (xDS)
        self.failure_mode = failure_mode
        self.rules: list[DescriptorRule] = []
        # Descriptor lists being read (an alias back to one is a cycle) and descriptor
        # nodes already read once (a second visit is an alias copy, see MAX_ALIAS_COPIES).
        self.open_lists: set[int] = set()
        self.seen_items: set[int] = set()
        self.copies = 0

    def read(self, text: str) -> DomainConfig | None:
        """The file's DomainConfig, or None with its problems recorded."""
        root = self.compose(text)
        if root is None:
            return None
        domain = self.tree(root)
        self.release(root)
        return domain

    def tree(self, root: Any) -> DomainConfig | None:
        """``read`` of a composed node tree."""
        try:
            return self.schema(root)
        except RecursionError:
            # Descriptors nested deeper than Python's stack: refused, not a crash.
            self.problems.append(
                ConfigProblem(self.name, 1, "descriptors", "nested too deeply to read")
            )
            return None

    def release(self, root: Any) -> None:
        """Let go of the node tree a part at a time, once read (its nodes' lines stay, for
        the problems said later). Dropped at once, the tree of a large file went in one
        step that held the GIL (20,000 descriptors: 45-70 ms), and a server loading it on
        a worker thread answered no call meanwhile; between parts, threads take turns."""
        while self.merges:
            self.merges.popitem()
        self.constructor = yaml.constructor.SafeConstructor()  # it keeps what it read
        todo = [root]
        while todo:
            node = todo.pop()
            children, node.value = node.value, []
            for child in children:
                for each in child if isinstance(child, tuple) else (child,):
                    if isinstance(each, yaml.CollectionNode):
                        todo.append(each)

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
        bootstrap = _bootstrap_key(root)
        if bootstrap is not None:
            self.problem(
                bootstrap,
                bootstrap.value,
                f"this is an Envoy bootstrap (the file envoy -c reads), not a rule {self.unit}; "
                "give ratewarden only rule files, of domain: and descriptors: (docs/config.md)",
            )
            return None
        entries = self.mapping(root, "the top level", _ROOT_KEYS)
        if entries is None:
            return None
        before = len(self.problems)
        found = self.text(entries, "domain")
        if len(self.problems) != before:  # not a single value: said, and not missing too
            return None
        if found is None or not found[1]:
            node = entries["domain"][0] if "domain" in entries else root
            each = "config file" if self.unit == "file" else "RateLimitConfig resource"
            self.problem(node, "domain", f"is missing or empty; every {each} names its domain")
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
        # By the stats key each descriptor writes (key_value): two that spell the same one
        # (key a_b, value c and key a, value b_c) would share their metrics, and upstream
        # refuses them as duplicates too.
        seen: dict[str, Node] = {}
        nodes: list[Node] = []
        for item in self.sequence(node, "descriptors"):
            built = self.descriptor(item, domain, parent)
            if built is None:
                continue
            composite = f"{parent}.{_path_part(built.key, built.value)}"
            first = seen.get(composite)
            if first is not None and (first.key, first.value) == (built.key, built.value):
                self.problem(
                    item,
                    "key",
                    f"duplicate descriptor {composite!r} at this level (first at {first.source}); "
                    "merge the two entries: two limits on one key go in one entry's "
                    "rate_limit: limits: list (docs/config.md#limits-several-limits-on-one-"
                    "descriptor), nested descriptors in its one descriptors: list",
                )
                continue
            if first is not None:
                self.problem(
                    item,
                    "key",
                    f"descriptor {composite!r} (key {built.key!r}) spells the same stats key as "
                    f"the one at {first.source} (key {first.key!r}); rename one of the keys",
                )
                continue
            seen[composite] = built
            nodes.append(built)
        return Level.of(nodes)

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
        before = len(self.problems)
        found_key = self.text(entries, "key")
        key_missing = found_key is None or not found_key[1]
        if key_missing and len(self.problems) == before:  # not a bad value said already
            node = entries["key"][0] if "key" in entries else item
            self.problem(node, "key", "is missing or empty; every descriptor needs a key")
        found_value = self.text(entries, "value")
        key = "" if found_key is None else found_key[1]
        value = "" if found_value is None else found_value[1]
        path = f"{parent}.{_path_part(key, value)}"
        rule = None
        # What every rule of this descriptor carries; its block adds the rest.
        descriptor = DescriptorRule(
            domain=domain,
            path=path,
            source="",
            limits=(),
            shadow_mode=self.flag(entries, "shadow_mode"),
            quota_mode=self.flag(entries, "quota_mode"),
            detailed_metric=self.flag(entries, "detailed_metric"),
            rlqs_weights=read_rlqs_weights(self, entries),
        )
        for block, read in (("rate_limit", read_rate_limit), ("budget", read_budget)):
            if block in entries:
                rule = read(self, entries, descriptor)
                if rule is not None:
                    self.rules.append(rule)
        if not any(block in entries for block in ("rate_limit", "budget")):
            check_weighted(self, entries, None)
        elif rule is not None:
            check_weighted(self, entries, rule)
        share_threshold = self.flag(entries, "share_threshold")
        if share_threshold and value and "*" not in value:
            self.problem(
                entries["share_threshold"][0],
                "share_threshold",
                f"has no meaning on the exact value {_shorten(value)}: only the values a "
                "wildcard (with *) or a key-only descriptor matches can share one counter; "
                "remove it or make the value a wildcard",
            )
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
            return read_metadata(node)
        except ConstructError as exc:
            mark = exc.problem_mark or node.start_mark
            self.problems.append(
                ConfigProblem(
                    self.name, mark.line + 1, "metadata", f"cannot be read: {exc.problem}"
                )
            )
            return MappingProxyType({})


def read_document(
    name: str,
    text: str,
    problems: list[ConfigProblem],
    unit: str = "file",
    failure_mode: str = DEFAULT_FAILURE_MODE,
    *,
    fast: bool = True,
) -> tuple[DomainConfig | None, FileReader]:
    """One document's DomainConfig (None with its problems added to ``problems``) and its reader.

    With ``fast``, libyaml composes the tree where it can (``PURE_ONLY``). A tree it
    composed that has a problem is dropped and the text read again by PyYAML's own
    loader: libyaml's messages differ, and so do some of its lines (an empty value in a
    flow mapping, ``{a: }``, is on the next token's line), and the messages are PyYAML's.
    A bad file costs a second read; a good one is read once.
    """
    root = _fast_root(text) if fast else None
    if root is not None:
        before = len(problems)
        reader = FileReader(name, problems, unit, failure_mode)
        domain = reader.tree(root)
        reader.release(root)
        if len(problems) == before:
            return domain, reader
        del problems[before:]
    reader = FileReader(name, problems, unit, failure_mode)
    return reader.read(text), reader


def _fast_root(text: str) -> Any:
    """The node tree libyaml composes, or None: read it with PyYAML's own loader instead
    (no libyaml, a ``PURE_ONLY`` character, an empty file, or anything libyaml refuses)."""
    if _FAST_LOADER is None or "\ufeff" in text[1:] or any(each in text for each in PURE_ONLY):
        return None
    try:
        loader = _FAST_LOADER(text)  # it encodes the text: a lone surrogate fails here
    except Exception:
        return None
    try:
        return loader.get_single_node()
    except Exception:  # said by PyYAML's own loader, with its message and line
        return None
    finally:
        loader.dispose()


def _bootstrap_key(root: Any) -> Any:
    """The first top-level key node of an Envoy bootstrap's, when ``root`` has one and no
    ``domain``; else None."""
    if not isinstance(root, yaml.MappingNode):
        return None
    keys = [key for key, _ in root.value if isinstance(key, yaml.ScalarNode)]
    if any(key.value == "domain" for key in keys):
        return None
    return next((key for key in keys if key.value in _BOOTSTRAP_KEYS), None)


def _path_part(key: str, value: str) -> str:
    return f"{key}_{value}" if value else key


def _wildcard(value: str) -> re.Pattern[str]:
    """``*`` matches zero or more characters, anywhere in the value; nothing else is special."""
    return re.compile(".*".join(re.escape(part) for part in value.split("*")), re.DOTALL)

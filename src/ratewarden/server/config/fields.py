"""Reading the fields of one rule file's YAML node tree, each problem recorded where it is.

``FieldReader`` is the plumbing every part of the schema uses: ``mapping`` checks a
mapping's keys against the ones allowed (following yaml.v2's ``<<`` merges),
``scalar``, ``text``, ``flag``, ``integer`` and ``sequence`` read one value, and
``problem`` records what is wrong as ``file:line: key: what is wrong and what to
do``. It knows no key of the config itself: ``server/config/reader.py`` gives it
the table of where a misplaced key belongs, and walks the file with it, and
``rate_limit.py`` and ``budget.py`` read a descriptor's blocks with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml  # type: ignore[import-untyped, unused-ignore]

from ratewarden.server.config.model import DEFAULT_FAILURE_MODE, ConfigProblem

__all__ = ["CONSTRUCT_ERRORS", "Entries", "FieldReader"]

#: Entries of a YAML mapping: key text -> (key node, value node).
Entries = dict[str, tuple[Any, Any]]

# What SafeConstructor raises, besides MarkedYAMLError, for a tagged scalar whose
# text does not fit its tag: `!!int abc`, `!!bool maybe`, `!!timestamp 2020-13-45`,
# `!!timestamp 2020-13-4520` (its pattern does not match, and PyYAML reads the missing
# match: AttributeError), and an int longer than Python converts (4,300 digits).
CONSTRUCT_ERRORS = (
    yaml.MarkedYAMLError,
    ValueError,
    KeyError,
    TypeError,
    OverflowError,
    AttributeError,
)


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


class FieldReader:
    """Reads values out of one file's YAML nodes, appending each problem to ``problems``.

    ``homes`` maps a key to where it belongs, for the message about a key that is
    unknown where it was written (``'burst' belongs in rate_limit``).
    """

    def __init__(self, name: str, problems: list[ConfigProblem], homes: Mapping[str, str]) -> None:
        self.name = name
        self.problems = problems
        self.homes = homes
        self.constructor = yaml.constructor.SafeConstructor()
        self.merges: dict[int, tuple[list[Any], list[Any]]] = {}
        #: A merged-in key's and value's node (by id) -> the mapping read with it last: a
        #: problem with one is said at that mapping's line, the one that needs the change.
        self.merged_into: dict[int, Any] = {}
        #: ``replaces`` names with their nodes, checked against the domain's rule names
        #: once every file of the domain is read (``loading.py``).
        self.replaced: list[tuple[str, Any]] = []
        #: The failure_mode of a rule that sets none (``serve --failure-mode``).
        self.failure_mode = DEFAULT_FAILURE_MODE

    def problem(self, node: Any, key: str, message: str) -> None:
        line = node.start_mark.line + 1 if node is not None else 0
        into = None if node is None else self.merged_into.get(id(node))
        if into is not None and into.start_mark.line + 1 != line:
            message += f" (this value comes from line {line}, merged in with <<)"
            line = into.start_mark.line + 1
        self.problems.append(ConfigProblem(self.name, line, key, message))

    def where(self, node: Any) -> str:
        return f"{self.name}:{node.start_mark.line + 1}"

    def mapping(self, node: Any, what: str, allowed: Sequence[str]) -> Entries | None:
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, what, f"must be a mapping of keys ({', '.join(allowed)})")
            return None
        own, merged = self.merge(node, what)
        entries: Entries = {}
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
            self.merged_into[id(key_node)] = self.merged_into[id(value_node)] = node
            if key not in allowed:
                self.problem(key_node, key, self._unknown(key, what, allowed))
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

    def _unknown(self, key: str, what: str, allowed: Sequence[str]) -> str:
        home = self.homes.get(key)
        if home is not None:
            return f"unknown key in {what}; {key!r} belongs in {home}"
        return f"unknown key in {what}; allowed here: {', '.join(allowed)}"

    def scalar(self, entries: Entries, key: str) -> tuple[Any, Any] | None:
        """``(node, python value)`` of a scalar entry, or None when absent or null."""
        if key not in entries:
            return None
        node = entries[key][1]
        if not isinstance(node, yaml.ScalarNode):
            self.problem(node, key, "must be a single value, not a list or mapping")
            return None
        try:
            value = self.constructor.construct_object(node)
        except CONSTRUCT_ERRORS as exc:
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

    def text(self, entries: Entries, key: str) -> tuple[Any, str] | None:
        node = entries[key][1] if key in entries else None
        if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:timestamp":
            # Its text, unread: yaml.v2 keeps a date a string, one no calendar has too.
            return node, str(node.value)
        found = self.scalar(entries, key)
        if found is None:
            return None
        node, _ = found
        # The source text, as yaml.v2 reads it into a string field: `value: 007` stays "007".
        return node, str(node.value)

    def flag(self, entries: Entries, key: str) -> bool:
        found = self.scalar(entries, key)
        if found is None:
            return False
        node, value = found
        if not isinstance(value, bool):
            self.problem(node, key, f"must be true or false, not {node.value!r}")
            return False
        return value

    def integer(self, entries: Entries, key: str, low: int, high: int) -> tuple[Any, int] | None:
        found = self.scalar(entries, key)
        if found is None:
            return None
        node, value = found
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(node, key, f"must be a whole number, not {node.value!r}{_hint(node)}")
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


def _hint(node: Any) -> str:
    """What to write instead of a number that is not a plain whole number: a quoted one
    (``"10"``) without its quotes, one in exponent form (``1e3``) in digits."""
    text = str(node.value).strip()
    quoted = getattr(node, "style", None) in ("'", '"')
    if quoted and text.isdigit():
        return "; drop the quotes"
    try:
        number = float(text)
    except ValueError:
        return ""
    if number.is_integer() and abs(number) < 2**64:
        return f"; write it in digits{' without quotes' if quoted else ''}: {int(number)}"
    return ""

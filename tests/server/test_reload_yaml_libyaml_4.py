"""Rule files read with libyaml (``reader.read_document``) load exactly as with PyYAML's
own loader: the same config, or the same problems at the same lines.

libyaml is about 3 times as fast, which matters for a reload of thousands of rules; but
it reads a few things differently (a tab or ``?`` PyYAML refuses, the line of an empty
value in a flow mapping, its own messages). Every file here is read both ways and the
results compared: the repository's rule fixtures, the cases where the two differ, and
a few thousand random edits of those files.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from ratewarden.server.config.reader import _fast_root, read_document

pytestmark = pytest.mark.skipif(
    not getattr(yaml, "__with_libyaml__", False), reason="PyYAML built without libyaml"
)

TESTS = Path(__file__).parent.parent
FILES = sorted([*TESTS.glob("server/fixtures/*.y*ml"), *TESTS.glob("upstream/cases/*.yaml")])

#: Where libyaml and PyYAML part ways, each once.
DIFFERENT = {
    "empty flow value": "domain: d\ndescriptors:\n  - {key: a, metadata: \n    }\n",
    "tab before a colon": "domain\t: d\n",
    "question mark in a flow value": "domain: d\ndescriptors:\n  - {key: path, value: /a?b}\n",
    "bare tag": "domain: !\n",
    "local tag in flow": "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: !minute}}\n",
    "line separator": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: \u2028}}\n",
    "next line": "domain: d\x85descriptors: []\n",
    "BOM inside": "domain: d\ndescriptors:\n\ufeff - key: a\n",
    "BOM first": "\ufeffdomain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: hour}}\n",
    "control character": "domain: d\x01\n",
    "lone surrogate": "domain: d\ud800\n",
    "deeper than libyaml goes": "domain: d\nx: " + "[" * 1100 + "]" * 1100 + "\n",
    "undefined alias": "domain: *nowhere\n",
    "an indentation PyYAML says otherwise": "domain: d\ndescriptors:\n  - key: a\n   value: b\n",
    "empty": "",
    "comment only": "# nothing\n",
    "CRLF": "domain: d\r\ndescriptors:\r\n  - key: a\r\n    rate_limit: {unit: hour}\r\n",
}

#: What random edits insert or put in place of a character.
PIECES = [
    *" \t\n\r-:#&*!|>'\"{}[],?%@`\\~.0a",
    "\x85", "\u2028", "\ufeff", "\x01", "é", "\U0001f600", ": ", "- ", "\n  ", "\r\n", "[]",
]  # fmt: skip


def both(text: str) -> tuple[Any, list[str]]:
    """The result of reading ``text`` with libyaml and with PyYAML's own loader."""
    results = []
    for fast in (True, False):
        problems: list[Any] = []
        domain, _ = read_document("rules.yaml", text, problems, fast=fast)
        results.append((domain, [str(problem) for problem in problems]))
    return results[0], results[1]


def test_libyaml_reads_a_plain_rule_file() -> None:
    """The fast path is taken (else every comparison below compares one loader with itself)."""
    text = (TESTS / "server/fixtures/valid_messaging.yaml").read_text()
    assert _fast_root(text) is not None


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.name)
def test_each_fixture_reads_the_same_with_libyaml(path: Path) -> None:
    """Valid or not, each fixture gives the same config or the same problems."""
    fast, pure = both(path.read_text(encoding="utf-8"))
    assert fast == pure


@pytest.mark.parametrize("text", DIFFERENT.values(), ids=list(DIFFERENT))
def test_where_libyaml_reads_otherwise_the_result_is_pure_pyyaml(text: str) -> None:
    """Each known difference: the result (and each message and line) is PyYAML's own."""
    fast, pure = both(text)
    assert fast == pure


def test_random_edits_of_the_fixtures_read_the_same_with_libyaml() -> None:
    """3,000 files, each a fixture with one to four characters inserted, deleted or
    replaced (seeded): the same config or problems either way."""
    draw = random.Random(4)
    texts = [path.read_text(encoding="utf-8") for path in FILES]
    for _ in range(3000):
        text = list(draw.choice(texts))
        for _ in range(draw.randint(1, 4)):
            at = draw.randrange(len(text) + 1)
            edit = draw.random()
            if edit < 0.4:
                text.insert(at, draw.choice(PIECES))
            elif text:
                at = min(at, len(text) - 1)
                if edit < 0.7:
                    del text[at]
                else:
                    text[at] = draw.choice(PIECES)
        edited = "".join(text)
        fast, pure = both(edited)
        assert fast == pure, edited

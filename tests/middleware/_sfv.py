"""A small, strict RFC 8941 parser for the List fields the RateLimit headers use.

Written from the RFC's parsing algorithm (section 4.2), independently of
``ratewarden.headers``: Lists of Items whose bare items are Strings, Tokens,
Integers, Decimals, Booleans or Byte Sequences, with parameters. Anything
else is a ``ValueError``, as the RFC says a parser must fail.
"""

from __future__ import annotations

import base64
import re
import string
from dataclasses import dataclass, field

BareItem = str | int | float | bool | bytes

_KEY_START = string.ascii_lowercase + "*"
_KEY_CHARS = string.ascii_lowercase + string.digits + "_-.*"
_TOKEN_START = string.ascii_letters + "*"
_TOKEN_CHARS = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~:/"


@dataclass
class Item:
    value: BareItem
    params: dict[str, BareItem] = field(default_factory=dict)


class _Parser:
    def __init__(self, text: str) -> None:
        if not text.isascii():
            raise ValueError("structured fields are ASCII")
        self.text = text
        self.pos = 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self) -> str:
        ch = self.peek()
        self.pos += 1
        return ch

    def skip(self, chars: str) -> None:
        while self.peek() and self.peek() in chars:
            self.pos += 1

    def list_(self) -> list[Item]:
        self.skip(" ")
        members: list[Item] = []
        while self.peek():
            members.append(self.item())
            self.skip(" \t")
            if not self.peek():
                return members
            if self.take() != ",":
                raise ValueError(f"expected ',' at {self.pos - 1} in {self.text!r}")
            self.skip(" \t")
            if not self.peek():
                raise ValueError("trailing comma")
        return members

    def item(self) -> Item:
        return Item(self.bare_item(), self.params())

    def params(self) -> dict[str, BareItem]:
        found: dict[str, BareItem] = {}
        while self.peek() == ";":
            self.take()
            self.skip(" ")
            key = self.key()
            value: BareItem = True
            if self.peek() == "=":
                self.take()
                value = self.bare_item()
            found[key] = value
        return found

    def key(self) -> str:
        if not self.peek() or self.peek() not in _KEY_START:
            raise ValueError(f"bad key start at {self.pos} in {self.text!r}")
        start = self.pos
        while self.peek() and self.peek() in _KEY_CHARS:
            self.pos += 1
        return self.text[start : self.pos]

    def bare_item(self) -> BareItem:
        ch = self.peek()
        if ch == "-" or ch.isdigit():
            return self.number()
        if ch == '"':
            return self.string()
        if ch == ":":
            return self.byte_sequence()
        if ch == "?":
            self.take()
            flag = self.take()
            if flag not in "01" or not flag:
                raise ValueError("bad boolean")
            return flag == "1"
        if ch and ch in _TOKEN_START:
            start = self.pos
            while self.peek() and self.peek() in _TOKEN_CHARS:
                self.pos += 1
            return self.text[start : self.pos]
        raise ValueError(f"unexpected {ch!r} at {self.pos} in {self.text!r}")

    def number(self) -> int | float:
        match = re.compile(r"-?\d{1,15}(\.\d{1,3})?").match(self.text, self.pos)
        if match is None:
            raise ValueError("bad number")
        text = match.group()
        self.pos = match.end()
        if "." in text:
            if len(text.lstrip("-").split(".")[0]) > 12:
                raise ValueError("decimal too long")
            return float(text)
        return int(text)

    def string(self) -> str:
        self.take()
        out = []
        while True:
            ch = self.take()
            if ch == "":
                raise ValueError("unterminated string")
            if ch == "\\":
                nxt = self.take()
                if nxt not in ('"', "\\"):
                    raise ValueError("bad escape")
                out.append(nxt)
            elif ch == '"':
                return "".join(out)
            elif not " " <= ch <= "~":
                raise ValueError("non-printable in string")
            else:
                out.append(ch)

    def byte_sequence(self) -> bytes:
        self.take()
        end = self.text.find(":", self.pos)
        if end < 0:
            raise ValueError("unterminated byte sequence")
        chunk = self.text[self.pos : end]
        if not re.fullmatch(r"[A-Za-z0-9+/=]*", chunk):
            raise ValueError("bad base64")
        self.pos = end + 1
        return base64.b64decode(chunk, validate=True)


def parse_list(text: str) -> list[Item]:
    """Parse a structured-field List; ``ValueError`` on anything RFC 8941 rejects."""
    parser = _Parser(text)
    members = parser.list_()
    if parser.peek():
        raise ValueError(f"trailing characters in {text!r}")
    return members

"""The memcache store's sans-I/O parts: the meta requests, the reply Parser, item naming and
values, server placement and the URL. Nothing here needs a server."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.storage import _memcache_wire as wire
from ratewarden.storage._memcache_items import Cache, decode, encode, item_of
from ratewarden.storage._memcache_link import Servers
from ratewarden.storage.memcache import parse_url

# -- requests


def test_requests_are_the_meta_commands_the_store_documents() -> None:
    """mg asks for the value and CAS; ms writes under a CAS or only when absent (ME); md deletes
    under a CAS; the value is sent with its exact length, CRLF inside it included."""
    assert wire.get(b"rw:{k}") == b"mg rw:{k} v c\r\n"
    assert wire.store(b"rw:{k}", b"a\r\nb", 7, 42) == b"ms rw:{k} 4 T7 C42 c\r\na\r\nb\r\n"
    assert wire.store(b"rw:{k}", b"{}", 2, None) == b"ms rw:{k} 2 T2 ME c\r\n{}\r\n"
    assert wire.delete(b"rw:{k}", 9) == b"md rw:{k} C9\r\n"
    assert wire.VERSION == b"version\r\n"


# -- the parser

ReplyOrError = wire.Reply | wire.ReplyError

_flags = st.lists(st.sampled_from([b"t10", b"f0", b"s5", b"k", b"O123"]), max_size=2)
_cas = st.none() | st.integers(0, 2**64 - 1)


@st.composite
def _replies(draw: st.DrawFn) -> tuple[bytes, object]:
    """One reply as memcached sends it, and what the parser must make of it (a Reply, or
    the text of a ReplyError)."""
    kind = draw(st.sampled_from(["VA", "HD", "NS", "EX", "NF", "EN", "MN", "VERSION", "error"]))
    if kind == "error":
        line = draw(
            st.sampled_from(
                [
                    b"ERROR",
                    b"CLIENT_ERROR bad command line format",
                    b"SERVER_ERROR out of memory storing object",
                    b"SERVER_ERROR object too large for cache",
                ]
            )
        )
        return line + b"\r\n", line.decode()
    if kind == "VERSION":
        return b"VERSION 1.6.18\r\n", wire.Reply(b"VERSION", None, b"1.6.18")
    cas = draw(_cas) if kind != "EN" else None
    flags = draw(_flags)
    if cas is not None:
        flags.insert(draw(st.integers(0, len(flags))), b"c%d" % cas)
    if kind == "VA":
        # Any bytes: CRLF, a line that looks like a reply, nothing at all.
        value = draw(st.binary(max_size=40) | st.sampled_from([b"\r\n", b"HD c1\r\nEN\r\n", b""]))
        head = b" ".join([b"VA", b"%d" % len(value), *flags])
        return head + b"\r\n" + value + b"\r\n", wire.Reply(b"VA", cas, value)
    head = b" ".join([kind.encode(), *flags])
    return head + b"\r\n", wire.Reply(kind.encode(), cas, None)


def _parsed(found: list[ReplyOrError]) -> list[object]:
    return [str(reply) if isinstance(reply, wire.ReplyError) else reply for reply in found]


@settings(max_examples=400, deadline=None)
@given(replies=st.lists(_replies(), min_size=1, max_size=12), data=st.data())
def test_replies_split_anywhere_come_out_whole_and_in_order(
    replies: list[tuple[bytes, object]], data: st.DataObject
) -> None:
    """However the bytes arrive (one at a time, in random chunks, all at once), the parser
    gives every reply once, whole, in order, and nothing before it is complete."""
    stream = b"".join(raw for raw, _ in replies)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=len(stream))))
    parser = wire.Parser()
    found: list[ReplyOrError] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        parser.feed(stream[start:end])
        found += parser.replies()
        # Never more replies than the bytes fed so far hold in full.
        assert len(found) <= sum(1 for _ in _whole(replies, end))
    assert _parsed(found) == [expected for _, expected in replies]
    assert parser.replies() == []


def _whole(replies: list[tuple[bytes, object]], fed: int) -> list[object]:
    done, total = [], 0
    for raw, expected in replies:
        total += len(raw)
        if total <= fed:
            done.append(expected)
    return done


def test_a_value_holding_crlf_and_reply_lines_is_data_not_replies() -> None:
    """The VA size, not a CRLF, ends a value: one that holds reply-like lines stays one value."""
    parser = wire.Parser()
    parser.feed(b"VA 13 c3\r\nHD c1\r\nEN\r\nxx\r\nHD c4\r\n")
    assert parser.replies() == [
        wire.Reply(b"VA", 3, b"HD c1\r\nEN\r\nxx"),
        wire.Reply(b"HD", 4, None),
    ]


def test_error_lines_are_reply_errors_and_only_out_of_memory_is_transient() -> None:
    """ERROR, CLIENT_ERROR and SERVER_ERROR are ReplyErrors carrying the line; retrying later
    may help only when the server is out of memory."""
    parser = wire.Parser()
    parser.feed(
        b"ERROR\r\nCLIENT_ERROR bad data chunk\r\nSERVER_ERROR out of memory storing object\r\n"
        b"SERVER_ERROR object too large for cache\r\nHD c1\r\n"
    )
    errors = parser.replies()
    assert [type(e) for e in errors[:4]] == [wire.ReplyError] * 4
    assert [str(e) for e in errors[:4]] == [
        "ERROR",
        "CLIENT_ERROR bad data chunk",
        "SERVER_ERROR out of memory storing object",
        "SERVER_ERROR object too large for cache",
    ]
    assert [e.transient for e in errors[:4] if isinstance(e, wire.ReplyError)] == [
        False,
        False,
        True,
        False,
    ]
    assert errors[4] == wire.Reply(b"HD", 1, None)


@pytest.mark.parametrize(
    ("stream", "says"),
    [
        (b"OK\r\n", "does not know"),
        (b"STORED\r\n", "does not know"),
        (b"VALUE k 0 1\r\n", "does not know"),
        (b"hd c1\r\n", "does not know"),
        (b"\r\n", "empty line"),
        (b"VA\r\n", "without a size"),
        (b"VA x c1\r\n", "without a size"),
        (b"VA -1 c1\r\n", "negative"),
        (b"VA 2 c1\r\nabcd\r\n", "not followed by CRLF"),
        (b"HD cX\r\n", "CAS flag"),
        (b"VA 1 c1x\r\na\r\n", "CAS flag"),
    ],
)
def test_a_reply_the_client_does_not_know_is_a_value_error(stream: bytes, says: str) -> None:
    """An unknown code or a malformed VA line is a ValueError (the link drops the connection),
    never a reply guessed at."""
    parser = wire.Parser()
    parser.feed(stream)
    with pytest.raises(ValueError, match=says):
        parser.replies()


def test_a_value_error_after_good_replies_still_raises() -> None:
    """A bad line after whole replies is not skipped: the stream cannot be trusted past it."""
    parser = wire.Parser()
    parser.feed(b"HD c1\r\nBOGUS\r\n")
    with pytest.raises(ValueError):
        parser.replies()


# -- items: names, values, the cache


def test_a_readable_name_is_kept_and_any_other_is_hashed() -> None:
    """Printable ASCII without spaces, up to 250 bytes, is memcached's own name; a name with a
    space, a control or non-ASCII character, or longer, is rw# and a 40-digit hash."""
    head = "rw:{" + "k" * 245 + "}"  # 250 bytes
    assert item_of([head + ":gcra:1:2:3"]).wire == head.encode()
    longer = item_of(["rw:{" + "k" * 246 + "}:gcra:1:2:3"]).wire
    for name in (longer, *(item_of([f"rw:{{{k}}}:x"]).wire for k in ("a b", "é", "a\tb"))):
        assert name.startswith(b"rw#") and len(name) == 43 and b"{" not in name
    # Different names never share a hash; the same name always has the same one.
    assert item_of(["rw:{a b}:x"]).wire != item_of(["rw:{a  b}:x"]).wire
    assert item_of(["rw:{é}:x"]).wire == item_of(["rw:{é}:y"]).wire


def test_an_item_holds_the_entries_of_one_hash_tag_only() -> None:
    """Every key of one step must share its hash tag: keys in two, or in none, are refused."""
    item = item_of(["rw:{a}:gcra:5:1:5", "rw:{a}:concurrency"])
    assert item.name == "rw:{a}" and item.entries == (":gcra:5:1:5", ":concurrency")
    with pytest.raises(StorageError, match="more than one hash tag"):
        item_of(["rw:{a}:x", "rw:{b}:x"])
    with pytest.raises(StorageError, match="no hash tag"):
        item_of(["rw:a:x"])
    with pytest.raises(StorageError, match="no hash tag"):
        item_of(["rw:}{a}:x"])


def test_values_round_trip_with_tuples_and_foreign_values_are_refused() -> None:
    """States come back as the tuples the algorithms keep; a value this store did not write is
    a StorageError naming the item, whatever it holds."""
    item = item_of(["rw:{k}:sliding_log:1"])
    entries = {":sliding_log:1": (((1, 2), (3, 4)), 99), ":concurrency": ((("é", 1, 5),), 7)}
    assert decode(item, encode(entries)) == entries
    for foreign in (
        b"hello",
        b"\xff\xfe",
        b"[]",
        b'{"rw":2,"e":{}}',
        b'{"rw":1}',
        b'{"rw":1,"e":[]}',
        b'{"rw":1,"e":{"x":[1]}}',
        b'{"rw":1,"e":{"x":[1,2.5]}}',
        json.dumps({"rw": 1, "e": {"x": [1, True]}}).encode(),
    ):
        with pytest.raises(StorageError, match=r"'rw:\{k\}'.*did not write") as caught:
            decode(item, foreign)
        assert "left unchanged" in str(caught.value)


def test_the_cache_keeps_the_newest_items_up_to_its_size() -> None:
    cache = Cache(2)
    cache.put(b"a", 1, {})
    cache.put(b"b", 2, {})
    cache.put(b"a", 3, {})  # a is the newest now
    cache.put(b"c", 4, {})
    assert (cache.get(b"a"), cache.get(b"b"), cache.get(b"c")) == ((3, {}), None, (4, {}))
    cache.drop(b"a")
    assert len(cache) == 1
    off = Cache(0)
    off.put(b"a", 1, {})
    assert len(off) == 0


# -- servers


def test_one_server_holds_every_item() -> None:
    servers = Servers([("127.0.0.1", 11211)])
    assert {servers.of(b"rw:{%d}" % i) for i in range(100)} == {0}


@pytest.mark.parametrize("count", [2, 3, 5])
def test_items_are_spread_evenly_over_the_servers(count: int) -> None:
    """Rendezvous hashing gives each of n servers about 1/n of the items, names of one length
    included (each server within 15% of its share over 6,000 names)."""
    servers = Servers([("127.0.0.1", 20000 + 7 * i) for i in range(count)])
    for names in (
        [b"rw:{user-%05d}" % i for i in range(6000)],
        [b"rw:{%d}" % i for i in range(6000)],
        [item_of([f"rw:{{k{i} é}}:x"]).wire for i in range(6000)],
    ):
        spread = Counter(servers.of(name) for name in names)
        share = len(names) / count
        assert all(0.85 * share < spread[i] < 1.15 * share for i in range(count)), spread


def test_removing_a_server_moves_only_its_own_items() -> None:
    """The rendezvous property: with one server gone, every item of the others stays put."""
    addresses = [("127.0.0.1", 20000 + i) for i in range(4)]
    every, fewer = Servers(addresses), Servers(addresses[:3])
    names = [b"rw:{%d}" % i for i in range(2000)]
    for name in names:
        before = every.of(name)
        if before != 3:
            assert fewer.of(name) == before


# -- the URL


def test_urls_name_servers() -> None:
    """HOST:PORT pairs, comma-separated; the port 11211 when left out; IPv6 in brackets."""
    assert parse_url("memcache://127.0.0.1:11311").addresses == (("127.0.0.1", 11311),)
    assert parse_url("memcached://cache").addresses == (("cache", 11211),)
    assert parse_url("memcache://cache:1/").addresses == (("cache", 1),)
    assert parse_url("MEMCACHE://a:1, b:2,c/").addresses == (("a", 1), ("b", 2), ("c", 11211))
    assert parse_url("memcache://[::1]:11300,[fe80::1]").addresses == (
        ("::1", 11300),
        ("fe80::1", 11211),
    )


@pytest.mark.parametrize(
    "url",
    [
        "127.0.0.1:11211",
        "redis://127.0.0.1:6379",
        "memcache:/127.0.0.1",
        "memcache://",
        "memcache://h:1/db",
        "memcache://h:1?timeout=1",
        "memcache://h:1#x",
        "memcache://user@h:1",
        "memcache://user:pw@h:1",
        "memcache://h:0",
        "memcache://h:65536",
        "memcache://h:-1",
        "memcache://h:x",
        "memcache://h:",
        "memcache://h: 1",
        "memcache://h:²",
        "memcache://h:١٢",
        "memcache://h:1,h:1",
        "memcache://h,h:11211",
        "memcache://:1",
        "memcache://h:1,,h:2",
        "memcache://h:1,",
        "memcache://a b:1",
        "memcache://::1:11211",
        "memcache://[::1",
        "memcache://[::1]x",
        "memcache://[]:1",
        "memcache://[::1]:1,[::1]:1",
        None,
        b"memcache://h:1",
    ],
)
def test_a_bad_url_is_a_configuration_error(url: object) -> None:
    """No scheme or another, a path, options, a user, a bad or missing port, a server named
    twice, an empty host: ConfigurationError, naming the URL."""
    with pytest.raises(ConfigurationError, match="memcache URL"):
        parse_url(url)  # type: ignore[arg-type]

"""No two distinct keys or descriptors share a store key, however hostile their text.

Each key function is shown injective the strong way: a reader written here
parses the store key back into exactly what built it. Two different inputs
that produced one key would have to parse back to both, which is impossible.
The strings come from an alphabet of every separator the schemes use (``:``,
``{``, ``}``, ``%``, ``/``, ``=``, ``*``, digits) plus arbitrary Unicode, so
that near-collisions such as ``("a", "b/c")`` vs ``("a/b", "c")`` are common.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Rate
from ratewarden.algorithms import ALGORITHMS, WINDOWS
from ratewarden.server.service import counter_key
from ratewarden.server.value_cap import overflow_key
from ratewarden.storage._keys import DEFAULT_PREFIX, state_key
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock

SETTINGS = settings(max_examples=500, deadline=None)

hostile = st.one_of(
    st.text(alphabet=":{}%/=*0123456789rls-7BD", max_size=12),
    st.text(max_size=8),
    st.sampled_from(["", "%7B", "%25", "}", "{", "1:a", "rls/1:x", "rls-overflow/"]),
)
rates = st.builds(
    Rate,
    st.integers(1, 1000),
    st.integers(1, 100_000),
    st.one_of(st.none(), st.integers(1, 1000)),
)
algorithms = st.sampled_from(sorted(ALGORITHMS))

#: A window's state key names its period alone (the count holds for any limit); a bucket's
#: names the whole rate.
_STATE = re.compile(
    r"^(?P<prefix>[^{}]+):\{(?P<key>[^{}]*)\}:(?P<algorithm>[a-z_]+)"
    r"(?::(?P<limit>\d+))?:(?P<period>\d+)(?::(?P<capacity>\d+))?$",
    re.DOTALL,
)


def unescape(text: str) -> str:
    """Undo the hash-tag escaping, one %XX at a time from the left."""
    table = {"%25": "%", "%7B": "{", "%7D": "}"}
    return re.sub("%25|%7B|%7D", lambda found: table[found.group()], text)


def read_state_key(key: str) -> tuple[str, str, str, int | None, int, int | None]:
    """(prefix, user key, algorithm, limit, period_us, capacity) from a state key; a
    window's limit and capacity are None (its key holds neither)."""
    found = _STATE.match(key)
    assert found is not None, key
    assert (found["limit"] is None) == (found["capacity"] is None), key
    return (
        found["prefix"],
        unescape(found["key"]),
        found["algorithm"],
        None if found["limit"] is None else int(found["limit"]),
        int(found["period"]),
        None if found["capacity"] is None else int(found["capacity"]),
    )


def read_fields(key: str, head: str) -> list[str]:
    """The ``<length>:<text>`` fields after ``head``, read by their lengths."""
    assert key.startswith(head), key
    rest, fields = key[len(head) :], []
    while True:
        length, colon, rest = rest.partition(":")
        assert colon and length.isdigit(), key
        fields.append(rest[: int(length)])
        rest = rest[int(length) :]
        if not rest:
            return fields
        assert rest[0] == "/", key
        rest = rest[1:]


@SETTINGS
@given(hostile, algorithms, rates)
def test_a_state_key_reads_back_to_exactly_what_built_it(
    key: str, algorithm: str, rate: Rate
) -> None:
    """state_key is injective over (key, algorithm, period) for a window algorithm and over
    (key, algorithm, rate) for a bucket: they come back out of it. A window's key holds no
    limit, so every limit of one period counts the same window (a limit edit keeps the
    count); a bucket's state means something only at its rate."""
    built = state_key(DEFAULT_PREFIX, key, algorithm, rate)
    window = algorithm in WINDOWS
    assert read_state_key(built) == (
        DEFAULT_PREFIX,
        key,
        algorithm,
        None if window else rate.limit,
        rate.period_us,
        None if window else rate.capacity,
    )


@SETTINGS
@given(hostile)
def test_the_cluster_hash_tag_is_the_whole_escaped_key(key: str) -> None:
    """Redis Cluster hashes the text between the first '{' and the next '}': the whole key,
    whatever braces it holds, so layers of one key never land in different slots."""
    rate = Rate.parse("1/s")
    built = state_key(DEFAULT_PREFIX, key, "gcra", rate)
    start = built.index("{")
    tag = built[start + 1 : built.index("}", start)]
    assert unescape(tag) == key


@SETTINGS
@given(hostile, st.lists(st.tuples(hostile, hostile), min_size=1, max_size=4))
def test_a_counter_key_reads_back_to_its_domain_and_entries(
    domain: str, entries: list[tuple[str, str]]
) -> None:
    """counter_key is injective over (domain, entries), values marked exact ('=') or shared
    ('*'): no value, however many separators it holds, can alias another descriptor."""
    parts = [(key, "=*"[index % 2] + value) for index, (key, value) in enumerate(entries)]
    fields = read_fields(counter_key(domain, parts), "rls/")
    assert fields[0] == domain
    assert list(zip(fields[1::2], fields[2::2], strict=True)) == parts


@SETTINGS
@given(hostile, hostile, st.lists(st.tuples(hostile, hostile), min_size=1, max_size=3))
def test_an_overflow_key_is_never_a_descriptor_key(
    domain: str, path: str, entries: list[tuple[str, str]]
) -> None:
    """The per-rule overflow counter cannot be reached by any request descriptor."""
    overflow = overflow_key(domain, path)
    assert read_fields(overflow, "rls-overflow/") == [domain, path]
    assert overflow != counter_key(domain, [(key, "=" + value) for key, value in entries])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(hostile, hostile), min_size=2, max_size=6, unique=True))
def test_distinct_descriptors_never_share_a_counter_on_a_store(
    descriptors: list[tuple[str, str]],
) -> None:
    """End to end on a store: each distinct (key, value) descriptor gets its own counter,
    so filling one never spends another's allowance."""
    store = MemoryStore(clock=ManualClock())
    rate = Rate.parse("1/minute")
    keys = {state_key("rw", counter_key("d", [(k, "=" + v)]), "gcra", rate) for k, v in descriptors}
    assert len(keys) == len(descriptors)
    for key, value in descriptors:
        assert store.hit("gcra", counter_key("d", [(key, "=" + value)]), rate).allowed

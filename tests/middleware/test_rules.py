"""The sans-I/O core: rule selection, costs, layering, shadow mode and the kill switch."""

from __future__ import annotations

import re

import pytest

from ratewarden import ConfigurationError, Limiter, MemoryStore
from ratewarden.middleware import RequestInfo, Rule, RuleSet, by_api_key, exempt, limit, override
from ratewarden.middleware._core import Outcome
from ratewarden.middleware._rules import compile_path
from ratewarden.middleware.concurrency import SlotPolicy
from ratewarden.middleware.idempotency import IdempotencyMiddleware
from ratewarden.storage.idempotency import AsyncMemoryIdempotencyStore
from ratewarden.testing import DecisionRecorder, ManualClock


def _request(method: str = "GET", path: str = "/", peer: str = "198.51.100.1", **headers: str):
    lowered = {name.replace("_", "-"): value for name, value in headers.items()}
    return RequestInfo(method, path, peer, lowered, {})


def _setup(rules: RuleSet | list[Rule], **kwargs: object) -> tuple[RuleSet, Limiter, ManualClock]:
    clock = ManualClock()
    ruleset = rules if isinstance(rules, RuleSet) else RuleSet(rules, clock=clock, **kwargs)  # type: ignore[arg-type]
    return ruleset, Limiter(MemoryStore(clock=clock)), clock


def _run(ruleset: RuleSet, limiter: Limiter, request: RequestInfo) -> Outcome:
    return ruleset.decide(request, ruleset.applicable(request), limiter.hit)


def _header(outcome: Outcome, name: str) -> str | None:
    return dict(outcome.headers).get(name)


@pytest.mark.parametrize(
    ("pattern", "path", "matched"),
    [
        ("/api/*", "/api/users", True),
        ("/api/*", "/api/users/1", False),
        ("/api/**", "/api/users/1", True),
        ("/users/{id}/posts", "/users/42/posts", True),
        ("/users/{id}/posts", "/users//posts", False),
        ("/a.b", "/aXb", False),
    ],
)
def test_path_patterns(pattern: str, path: str, matched: bool) -> None:
    """* stays within a segment, ** crosses segments, {name} is one segment, the rest is literal."""
    assert bool(compile_path(pattern).fullmatch(path)) is matched


def test_rules_select_by_path_and_method() -> None:
    """A rule applies only to its paths and methods; others pass with no headers."""
    ruleset, limiter, _ = _setup(
        [Rule("writes", "1/minute", paths=["/orders/**"], methods=["POST", "put"])]
    )
    assert _run(ruleset, limiter, _request("GET", "/orders/1")).headers == ()
    assert _run(ruleset, limiter, _request("POST", "/other")).headers == ()
    assert not _run(ruleset, limiter, _request("PUT", "/orders/1")).blocked
    assert _run(ruleset, limiter, _request("POST", "/orders/2")).blocked


def test_cost_per_method_reads_one_writes_five() -> None:
    """{"GET": 1, "POST": 5}: ten points allow ten reads, or two writes."""
    ruleset, limiter, _ = _setup([Rule("points", "10/hour", cost={"GET": 1, "POST": 5})])
    assert not _run(ruleset, limiter, _request("POST", peer="1.1.1.1")).blocked
    assert not _run(ruleset, limiter, _request("POST", peer="1.1.1.1")).blocked
    assert _run(ruleset, limiter, _request("GET", peer="1.1.1.1")).blocked
    outcomes = [_run(ruleset, limiter, _request("GET", peer="2.2.2.2")) for _ in range(11)]
    assert [o.blocked for o in outcomes] == [False] * 10 + [True]


def test_cost_callable_and_default_for_other_methods() -> None:
    """A callable prices each request; "*" prices methods the table does not list."""
    ruleset, limiter, _ = _setup(
        [
            Rule("size", "10/hour", cost=lambda r: int(r.headers.get("x-units", "1"))),
            Rule("table", "100/hour", cost={"GET": 1, "*": 50}),
        ]
    )
    outcome = _run(ruleset, limiter, _request("DELETE", x_units="4"))
    # "table" has 100 - 50 = 50 left, "size" 10 - 4 = 6: size is the binding rule.
    assert _header(outcome, "RateLimit") is not None
    assert '"size";r=6' in str(_header(outcome, "RateLimit"))


def test_bad_cost_from_a_callable_is_a_configuration_error() -> None:
    """A cost callable returning a negative number fails loudly, naming the rule."""
    ruleset, limiter, _ = _setup([Rule("size", "10/hour", cost=lambda r: -1)])
    with pytest.raises(ConfigurationError, match="size"):
        _run(ruleset, limiter, _request())


def test_layering_backstop_and_contract_headers_describe_the_most_restrictive() -> None:
    """Per-IP backstop and per-key contract both apply; headers show whichever is tighter."""
    recorder = DecisionRecorder()
    clock = ManualClock()
    limiter = Limiter(MemoryStore(clock=clock), on_decision=recorder)
    ruleset = RuleSet(
        [Rule("per-ip", "5/minute"), Rule("contract", "3/minute", key=by_api_key())], clock=clock
    )
    first = _run(ruleset, limiter, _request(x_api_key="a"))
    assert '"contract";r=2' in str(_header(first, "RateLimit"))
    for _ in range(2):
        _run(ruleset, limiter, _request(x_api_key="a"))
    denied = _run(ruleset, limiter, _request(x_api_key="a"))
    assert denied.blocked and '"contract";r=0' in str(_header(denied, "RateLimit"))
    # Another key from the same address: the contract is fresh, the backstop has 1 left.
    other = _run(ruleset, limiter, _request(x_api_key="b"))
    assert not other.blocked and '"per-ip";r=0' in str(_header(other, "RateLimit"))
    backstop = _run(ruleset, limiter, _request(x_api_key="c"))
    assert backstop.blocked and '"per-ip";r=0' in str(_header(backstop, "RateLimit"))
    # The backstop's denial stopped evaluation: key "c" never reached the contract.
    # Contract calls: four for key "a" (the fourth denied), one for "b", none for "c".
    decided = recorder.keys()
    assert sum(key.startswith("contract:") for key in decided) == 5
    assert len(set(decided)) == 3


def test_missing_identity_uses_the_fallback_never_unlimited() -> None:
    """Requests without an API key share the rule's fallback bucket ("anonymous")."""
    ruleset, limiter, _ = _setup([Rule("contract", "2/minute", key=by_api_key())])
    outcomes = [_run(ruleset, limiter, _request(peer=f"10.0.0.{i}")) for i in range(3)]
    assert [o.blocked for o in outcomes] == [False, False, True]


def test_shadow_rule_never_blocks_and_reports_what_it_would_have() -> None:
    """A shadow rule counts would-be blocks per key with first/last time; no headers from it."""
    ruleset, limiter, clock = _setup([Rule("dark", "2/minute", shadow=True)])
    start = clock.now()
    for _i in range(5):
        assert not _run(ruleset, limiter, _request(peer="9.9.9.9")).blocked
        clock.advance(1)
    for _ in range(3):
        outcome = _run(ruleset, limiter, _request(peer="8.8.8.8"))
        assert outcome.headers == ()
    report = ruleset.shadow_report()["dark"]
    assert report.would_block == 3 + 1
    assert report.first_at == start + 2
    assert [(k.key, k.count) for k in report.top_keys] == [
        ("dark:ip:9.9.9.9", 3),
        ("dark:ip:8.8.8.8", 1),
    ]


def test_shadow_top_keys_are_bounded() -> None:
    """With report_size 2, only two keys are tracked, and the heaviest stays on top."""
    ruleset, limiter, _ = _setup([Rule("dark", "1/hour", shadow=True)], report_size=2)
    for peer in ["1.1.1.1"] * 6 + ["2.2.2.2", "3.3.3.3", "4.4.4.4"] * 2:
        _run(ruleset, limiter, _request(peer=peer))
    report = ruleset.shadow_report()["dark"]
    assert len(report.top_keys) == 2
    assert report.top_keys[0].key == "dark:ip:1.1.1.1" and report.top_keys[0].error == 0
    assert report.would_block == 5 + 3


def test_kill_switch_disables_and_reenables_at_runtime() -> None:
    """disable() stops a rule on the next request; enable() brings it back with its state."""
    ruleset, limiter, _ = _setup([Rule("strict", "1/hour")])
    assert not _run(ruleset, limiter, _request()).blocked
    assert _run(ruleset, limiter, _request()).blocked
    ruleset.disable("strict")
    assert ruleset.disabled == {"strict"}
    assert _run(ruleset, limiter, _request()) == Outcome(False)
    ruleset.enable("strict")
    assert _run(ruleset, limiter, _request()).blocked


def test_set_shadow_at_runtime_dark_launches_an_enforced_rule() -> None:
    """set_shadow(name, True) stops blocking and starts reporting; False enforces again."""
    ruleset, limiter, _ = _setup([Rule("strict", "1/hour")])
    _run(ruleset, limiter, _request())
    ruleset.set_shadow("strict", True)
    assert not _run(ruleset, limiter, _request()).blocked
    assert ruleset.shadow_report()["strict"].would_block == 1
    ruleset.set_shadow("strict", False)
    assert _run(ruleset, limiter, _request()).blocked


def test_kill_switch_refuses_unknown_names() -> None:
    """A typo in an incident must not be a silent no-op."""
    ruleset, _, _ = _setup([Rule("strict", "1/hour")])
    with pytest.raises(ConfigurationError, match="stirct"):
        ruleset.disable("stirct")


def test_route_metadata_exempt_override_and_extra_rule() -> None:
    """Decorators change what applies to one endpoint, found through the resolver."""

    @exempt("per-ip")
    @limit("1/minute", name="export-once")
    def export() -> None: ...

    @override("per-ip", cost=3)
    def heavy() -> None: ...

    @exempt()
    def health() -> None: ...

    views = {"/export": export, "/heavy": heavy, "/health": health}
    clock = ManualClock()
    ruleset = RuleSet(
        [Rule("per-ip", "3/minute")], clock=clock, resolver=lambda r: views.get(r.path)
    )
    limiter = Limiter(MemoryStore(clock=clock))
    assert _run(ruleset, limiter, _request(path="/health")) == Outcome(False)
    first = _run(ruleset, limiter, _request(path="/export"))
    assert '"export-once";r=0' in str(_header(first, "RateLimit"))
    assert _run(ruleset, limiter, _request(path="/export")).blocked
    assert not _run(ruleset, limiter, _request(path="/heavy")).blocked
    assert _run(ruleset, limiter, _request(path="/other")).blocked


def test_route_rule_named_like_a_global_rule_is_an_error() -> None:
    """@limit must not shadow a global rule's name (they would share keys by accident)."""

    @limit("1/minute", name="per-ip")
    def view() -> None: ...

    ruleset, limiter, _ = _setup([Rule("per-ip", "3/minute")], resolver=lambda r: view)
    with pytest.raises(ConfigurationError, match="per-ip"):
        _run(ruleset, limiter, _request())


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Rule("has space", "1/s"), "has space"),
        (lambda: Rule("r", "1/fortnight"), "fortnight"),
        (lambda: Rule("r", "1/s", paths=["no-slash"]), "no-slash"),
        (lambda: Rule("r", "1/s", cost=-2), "-2"),
        (lambda: Rule("r", "1/s", cost={"GET": 1.5}), "1.5"),
        (lambda: Rule("r", "1/s", key="x-api-key"), "key extractor"),  # type: ignore[arg-type]
        (lambda: RuleSet([Rule("a", "1/s"), Rule("a", "2/s")]), "two rules"),
        (lambda: RuleSet([Rule("a", "1/s")], report_size=0), "report size"),
        (lambda: override("a"), "rates=, cost="),
        (lambda: limit("1/s", name="bad name"), "bad name"),
        # A method name is an HTTP token: "GET POST" would select no request, ever.
        (lambda: Rule("r", "1/s", methods="GET POST"), "rule 'r' methods: 'GET POST' is not"),
        (lambda: Rule("r", "1/s", methods=["GET", ""]), "methods: '' is not a method name"),
        (lambda: Rule("r", "1/s", methods=[b"GET"]), "methods: b'GET' is not"),  # type: ignore[list-item]
        (lambda: Rule("r", "1/s", methods=3), "methods=3: a method name or several"),  # type: ignore[arg-type]
        (lambda: Rule("r", "1/s", methods=[]), "methods=[]: selects no request"),
        (lambda: Rule("r", "1/s", cost={"GET ": 2}), "rule 'r' cost: 'GET ' is not"),
        (lambda: Rule("r", "1/s", methods="POST,PUT"), "'POST,PUT' is not a method"),
    ],
)
def test_bad_rules_are_configuration_errors(build: object, message: str) -> None:
    """Bad rule settings fail at construction with the offending value in the message."""
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        build()  # type: ignore[operator]


async def _no_app(scope: object, receive: object, send: object) -> None:
    raise AssertionError("never called")


@pytest.mark.parametrize("pattern", ["/orders/{id", "/orders/id}", "/a/{}", "/a/{1st}", "/{a}}"])
def test_a_brace_that_encloses_no_name_is_refused_naming_the_pattern(pattern: str) -> None:
    """``"/orders/{id"`` was taken as a literal and matched no request; now a rule, the
    concurrency middleware's paths and the idempotency middleware's ``required`` refuse it,
    naming the pattern and whose it is."""
    said = f"path pattern {pattern!r} has a '{{' or '}}' that does not enclose a name"
    with pytest.raises(ConfigurationError, match=re.escape(f"rule 'r': {said}")):
        Rule("r", "1/minute", paths=[pattern])
    with pytest.raises(ConfigurationError, match=re.escape(f"concurrency middleware: {said}")):
        SlotPolicy(limit=1, paths=pattern)
    with pytest.raises(ConfigurationError, match=re.escape(said)):
        IdempotencyMiddleware(_no_app, AsyncMemoryIdempotencyStore(), required=[pattern])


@pytest.mark.parametrize("rules", [Rule("a", "1/s"), 5, None, "a", {"a": Rule("a", "1/s")}])
def test_a_ruleset_of_one_rule_or_no_list_says_to_pass_a_list(rules: object) -> None:
    """``RuleSet(Rule(...))`` raised TypeError ('Rule' object is not iterable); now it, and
    anything else that is not a list of rules, is a ConfigurationError saying what to pass."""
    with pytest.raises(ConfigurationError, match=r"must be a list of Rule objects; for one rule"):
        RuleSet(rules)  # type: ignore[arg-type]


def test_method_names_are_upper_cased_and_select_their_requests() -> None:
    """Valid method names of any case select those methods only; a cost table's too."""
    rule = Rule("r", "5/minute", methods=("get", "Post"), cost={"post": 3, "*": 2})
    assert rule.methods == frozenset({"GET", "POST"})
    assert rule.matches(_request("GET")) and rule.matches(_request("POST"))
    assert not rule.matches(_request("DELETE"))
    assert [rule.cost(_request(method)) for method in ("POST", "GET")] == [3, 2]


def test_rates_override_is_a_separate_budget_cost_override_shares() -> None:
    """@override(rates=...) counts apart from the rule elsewhere; @override(cost=...) does not."""

    @override("per-ip", rates="2/minute")
    def search() -> None: ...

    @override("per-ip", cost=2)
    def heavy() -> None: ...

    views = {"/search": search, "/heavy": heavy}
    clock = ManualClock()
    ruleset = RuleSet(
        [Rule("per-ip", "3/minute")], clock=clock, resolver=lambda r: views.get(r.path)
    )
    limiter = Limiter(MemoryStore(clock=clock))
    assert [_run(ruleset, limiter, _request(path="/search")).blocked for _ in range(3)] == [
        False,
        False,
        True,
    ]
    # The global budget of 3 is untouched by /search: one GET, then a heavy call of 2.
    assert not _run(ruleset, limiter, _request(path="/")).blocked
    assert not _run(ruleset, limiter, _request(path="/heavy")).blocked
    assert _run(ruleset, limiter, _request(path="/")).blocked

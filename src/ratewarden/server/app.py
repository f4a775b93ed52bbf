"""The one composition root of ``ratewarden serve``: settings in, a running server out.

``RateLimitServer`` builds the store, loads the rules, wraps the service in the failure mode and
hands it to both transports (gRPC and HTTP, whose listeners ``server/listeners.py`` builds,
binds and stops), then keeps two background loops: the config watcher (hot reload) and the
health loop (serving while a config is loaded and the store answers a ping, or whatever it
answers with ``--no-health-follows-store``, upstream's environment's default). With rules
from an xDS server (``--config-xds``) the watcher is the xDS subscription instead, and ``start``
opens the ports once its first good rules are applied (with ``--xds-force-start``, at once:
every call fails ``ServiceUnavailableError`` until then). Its ``stats`` (``ServiceStats``) count
every decision, call and config load for ``/metrics`` and the dashboard, tallied on the request
path and flushed once a second (and to StatsD and DogStatsD every ``--statsd-interval``); with
``--workers`` each worker also publishes its dashboard figures for the others once a second
(both loops: ``server/stats_loops.py``). The store is memory, Redis or memcached (``open_store``).
``server/process.py`` runs it: one process until SIGTERM or SIGINT, or ``--workers`` of them.

Shutdown is graceful and bounded: ``drain`` turns health NOT_SERVING, calls still answered
(for ``--drain`` seconds: ``server/process.py``), then ``stop`` hands the quota streams over
(``--rlqs``: their Envoys told to expire their assignments, the shares given back in the
store), the listeners stop accepting, calls in flight get what is left of ``--grace`` seconds
to finish, the spans left are sent (``--tracing``), then the store closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from ratewarden.errors import ConfigurationError, ServiceUnavailableError
from ratewarden.server import config as rules
from ratewarden.server.dashboard import shared
from ratewarden.server.dashboard.view import render
from ratewarden.server.decision_log import with_decision_log
from ratewarden.server.dogstatsd import statsd_sinks
from ratewarden.server.health import HealthState
from ratewarden.server.listeners import (
    grpc_listener,
    http_listeners,
    serving_fields,
    start_listeners,
    stop_listeners,
)
from ratewarden.server.logs import configure_logging  # re-exported: callers import it here
from ratewarden.server.reload import ConfigWatcher
from ratewarden.server.response import ResponseMessage, fallback_response
from ratewarden.server.rlqs import RateLimitQuotaServicer
from ratewarden.server.rlqs.build import servicer
from ratewarden.server.rlqs.figures import introspection
from ratewarden.server.rules_source import file_loader
from ratewarden.server.service import AsyncRateLimitService
from ratewarden.server.settings import Settings, redacted, store_scheme
from ratewarden.server.stats import ServiceStats, multiprocess_dir
from ratewarden.server.stats_loops import flush_loop, publish_loop
from ratewarden.server.store_check import refuse_unusable, store_breaker, store_fault
from ratewarden.server.tracing import tracing_of
from ratewarden.server.xds import XdsSubscription, load_resources, source_of
from ratewarden.storage import AsyncStore
from ratewarden.storage.memcache import AsyncMemcacheStore
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.storage.split import AsyncSplitStore

__all__ = ["RateLimitServer", "configure_logging", "open_store", "settings_store"]

log = logging.getLogger("ratewarden.server")

#: A store that takes longer than this to answer a ping counts as down.
PING_TIMEOUT_S = 1.0
#: The failure of a call before the first rules (--xds-force-start), as upstream words it.
NO_RULES = "no rate limit configuration loaded"


def open_store(url: str, *, prefix: str = "rw", timeout: float = 0.02) -> AsyncStore:
    """The store ``url`` names: ``memory`` (embedded), ``memcache://HOST:PORT[,...]`` (over TLS,
    from a DNS SRV record: ``storage/_memcache_url``) or a Redis
    URL (``ratewarden[redis]``), its keys starting with ``prefix``, each call to a server
    waiting ``timeout`` seconds at most."""
    scheme = store_scheme(url)
    if scheme == "memory":
        return AsyncMemoryStore()
    if scheme == "memcache":
        memcache: AsyncStore = AsyncMemcacheStore.from_url(url, prefix=prefix, timeout=timeout)
        return memcache
    try:
        from ratewarden.storage.redis import AsyncRedisStore
    except ImportError as exc:
        raise ConfigurationError(
            f"store {redacted(url)!r} needs the Redis client: pip install 'ratewarden[redis]' "
            f"(in a clone: pip install -e '.[redis]'; scripts/serve installs it) ({exc})"
        ) from exc
    try:
        return AsyncRedisStore.from_url(url, prefix=prefix, timeout=timeout)
    except ConfigurationError as exc:
        if "://" not in url or scheme.startswith(("redis", "valkey", "unix")):
            raise
        # An unknown scheme: the Redis URL's message lists its own schemes only.
        raise ConfigurationError(
            f"{exc}, memcache:// (memcached://, memcaches://, memcache+srv://) or memory"
        ) from None


def settings_store(settings: Settings) -> AsyncStore:
    """The store ``settings`` name, with their key prefix and timeout (and per-second
    limits on a store of their own with ``--store-per-second``)."""

    def opened(url: str) -> AsyncStore:
        return open_store(url, prefix=settings.key_prefix, timeout=settings.store_timeout)

    store = opened(settings.store_url)
    if settings.store_per_second is None:
        return store
    return AsyncSplitStore(store, opened(settings.store_per_second))


class RateLimitServer:
    """Everything one ``ratewarden serve`` process runs. ``start`` then ``stop``.

    ``store`` replaces the one ``settings.store_url`` names (tests pass their own).
    """

    def __init__(self, settings: Settings, *, store: AsyncStore | None = None) -> None:
        self.settings = settings
        mapping, in_ms = settings.metrics_mapping, settings.metrics_response_time_ms
        names = settings.metrics_upstream_names  # on the system clock:
        self.stats = ServiceStats(mapping=mapping, response_time_ms=in_ms, upstream_names=names)
        #: Upstream's stats over StatsD and DogStatsD (``--statsd``, ``--dogstatsd``).
        self.statsd = statsd_sinks(settings, os.environ)
        self.stats.sinks.extend(self.statsd)
        self.watcher: ConfigWatcher[rules.RateLimitConfig] | None = None
        self.xds: XdsSubscription[rules.RateLimitConfig] | None = None
        if settings.config_xds is None:
            self.watcher = ConfigWatcher(
                settings.config_paths,
                file_loader(settings),
                self._apply,
                on_load=self.stats.config_load,
                files=settings.config_files,
            )
            self.config = self.watcher.load_initial()
        else:
            load = functools.partial(
                load_resources,
                merge_domains=settings.merge_domains,
                default_failure_mode=settings.failure_mode,
            )
            self.xds = XdsSubscription(
                source_of(settings), load, self._apply, self.stats.config_load
            )
            self.config = rules.RateLimitConfig(MappingProxyType({}))  # none till the first update
        #: False until the first rules are applied: calls fail till then (--xds-force-start).
        self.rules_loaded = self.watcher is not None
        self.store: AsyncStore = store if store is not None else settings_store(settings)
        self.service = AsyncRateLimitService(
            self.config,
            self.store,
            shadow=settings.shadow,
            quota_mode=settings.quota_mode,
            charge_denied=settings.charge_denied,
            near_limit_ratio=settings.near_limit_ratio,
            response_headers=settings.response_headers,
            legacy_header_names=settings.legacy_header_names,
            hooks=with_decision_log(self.stats, settings.log_level),
            max_values_per_rule=settings.max_values_per_rule or None,
            breaker=store_breaker(
                settings.breaker_failures,
                settings.breaker_cooldown,
                self.stats.metrics,
                settings.breaker_failure_ratio,
                settings.breaker_window,
            ),
            over_limit_cache=settings.over_limit_cache,
            response_metadata=settings.response_metadata,
            default_failure_mode=settings.failure_mode,
        )
        #: The budget rules' tokens owed through a store outage (paid by refresh_health).
        self.budgets = self.service.budgets
        #: Envoy's quota service (``--rlqs``): its shares live in this process on the memory
        #: store, in the store for several replicas on Redis or memcached (docs/rlqs.md).
        self.quota: RateLimitQuotaServicer | None = None
        if settings.rlqs:
            shared = not isinstance(self.store, AsyncMemoryStore)
            prefix = getattr(self.store, "prefix", settings.key_prefix) if shared else None
            limiter, registry = self.service.limiter, self.stats.registry
            self.quota = servicer(settings, self.config, limiter, registry, prefix)
            self.quota.refusing = None if self.rules_loaded else NO_RULES
        # The listeners (server/listeners.py): gRPC, HTTP, and the debug and metrics ports.
        self.transport = settings.grpc_transport
        services = () if self.quota is None else (self.quota.handler(),)
        #: A span per call over OTLP (--tracing), or None.
        self.tracing = tracing_of(settings)
        self.grpc = grpc_listener(
            settings,
            self.should_rate_limit,
            services,
            answer_wire=self.should_rate_limit_wire,
            tracing=self.tracing,
            on_refused=self.stats.client_san_refused.inc,
            tls_events=self.stats.tls,
        )
        self.http, self.debug, self.prometheus = http_listeners(settings, self)
        self.metrics_port = 0
        self.grpc_port = 0
        self.http_port = 0
        self.debug_port = 0
        self.errors = 0
        #: Called after each config swap (``ratewarden serve``: ``heap.refreeze``).
        self.config_applied: Callable[[], None] | None = None
        self.health = HealthState(settings)
        self._rules_changed = asyncio.Event()  # a config that brings or leaves no domain
        self._draining = False  # health NOT_SERVING for good, calls still answered
        #: The ShouldRateLimit calls (gRPC and /json) being answered right now.
        self.in_flight = 0
        self._tasks: list[asyncio.Task[None]] = []

    # --- what the transports call -------------------------------------------------

    async def should_rate_limit(self, request: Any) -> Any:
        """The service's answer; on an unexpected failure, the ``--on-error`` answer instead."""
        return ResponseMessage.FromString(await self.should_rate_limit_wire(request))

    async def should_rate_limit_wire(self, request: Any) -> bytes:
        """``should_rate_limit``'s answer as its wire bytes (what the native transport sends)."""
        if not self.rules_loaded:  # served before the first rules: Envoy's failure mode decides
            self.stats.request(0.0, failed=True)
            raise ServiceUnavailableError(NO_RULES)
        started = time.perf_counter()
        self.in_flight += 1
        try:
            answer = await self.service.should_rate_limit_wire(request)
        except ConfigurationError:
            raise  # a malformed request: the transport says so (INVALID_ARGUMENT / 400)
        except asyncio.CancelledError:  # the client gave up (its deadline, Envoy's timeout)
            self.stats.request(time.perf_counter() - started, cancelled=True)
            raise
        except Exception:
            self.errors += 1
            self.stats.request(time.perf_counter() - started, failed=True)
            log.exception(
                "ShouldRateLimit failed; answering per --on-error",
                extra={
                    "event": "call_failed",
                    "domain": request.domain,
                    "on_error": self.settings.on_error,
                },
            )
            deny = self.settings.on_error == "closed"
            return bytes(fallback_response(request, deny=deny).SerializeToString())
        finally:
            self.in_flight -= 1
        self.stats.request(time.perf_counter() - started)
        return answer

    def serving(self) -> bool:
        return self.health.serving and not self._draining

    def rules_text(self) -> str:
        return str(self.config.describe())

    def rules_dict(self) -> dict[str, Any]:
        return dict(self.config.to_dict())

    def metrics(self, accept: str) -> tuple[bytes, str]:
        """``/metrics`` in the format ``accept`` asks for; all workers' when several serve."""
        return self.stats.exposition(accept)

    def dashboard(self) -> dict[str, Any]:
        """``/dashboard.json``: this worker's live figures, merged with the other workers'."""
        state = self.stats.live.state()
        directory = multiprocess_dir()
        states = shared.gather(directory, state) if directory is not None else [state]
        view = render(states, self.config.rules, self.stats.clock.now())
        view["rlqs"] = self.quota is not None  # the page's quota panel reads /rlqs.json
        return view

    def rlqs(self) -> dict[str, Any] | None:
        """``/rlqs.json``: the quota service's streams, counts and assignments (None when off)."""
        quota = self.quota
        return None if quota is None else {**quota.state(), **introspection(quota.quota.figures())}

    def rlqs_streams(self) -> int | None:
        """The open quota streams, for ``/healthcheck`` (None when RLQS is off)."""
        return None if self.quota is None else self.quota.quota.streams

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Bind both ports, then start the health and reload loops; OSError on a busy port.

        With rules from xDS, the subscription starts first and the ports are bound once
        its first good rules are applied (as long as that takes; cancel to give up), or at
        once with ``--xds-force-start``.
        """
        s = self.settings
        await refuse_unusable(self.store, PING_TIMEOUT_S)  # too old, or refuses the password
        if self.xds is not None:
            self._tasks.append(await self.xds.start(wait=not s.xds_force_start))
        ports = await start_listeners(s, self.grpc, self.http, self.debug, self.prometheus)
        self.grpc_port, self.http_port, self.debug_port, self.metrics_port = ports
        await self.refresh_health()
        self._tasks.append(asyncio.create_task(self._health_loop()))
        flushing = flush_loop(self.stats, self.statsd, s.statsd_interval)
        self._tasks.append(asyncio.create_task(flushing))
        if s.reload_interval > 0 and self.watcher is not None:
            self._tasks.append(asyncio.create_task(self.watcher.run(s.reload_interval)))
        directory = multiprocess_dir()
        dashboard = s.dashboard != "off"
        if directory is not None and (dashboard or self.stats.mapped is not None):
            publishing = publish_loop(self.stats, directory, dashboard=dashboard)
            self._tasks.append(asyncio.create_task(publishing))
        if self.quota is not None:
            self._tasks.append(asyncio.create_task(self.quota.run()))
        log.info("serving", extra=serving_fields(s, self.transport, ports))

    async def close(self) -> None:
        """What a server whose ``start`` never finished holds: the StatsD socket, the spans'
        exporter, the store."""
        for sink in self.statsd:
            await sink.close()
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.shutdown)
        await self.store.aclose()

    async def drain(self) -> None:
        """Report NOT_SERVING from now on (gRPC health, ``/healthcheck`` 500), whatever the store
        says, while calls are still answered: the first step of a graceful stop."""
        self._draining = True
        await self.grpc.set_serving(False)

    async def stop(self, grace: float | None = None) -> None:
        """Turn NOT_SERVING, refuse new calls, let calls in flight finish, close the store."""
        grace = self.settings.grace if grace is None else grace
        self.health.serving = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.quota is not None:
            # Envoys told to expire their assignments now, and their shares given back in the
            # store (docs/rlqs.md, "Stopping"); an open stream would hold the grace to its end.
            started = time.monotonic()
            await self.quota.hand_over(grace)
            grace = max(0.0, grace - (time.monotonic() - started))
        listeners = (self.grpc, self.http, self.debug, self.prometheus)
        await stop_listeners(grace, *listeners, running=lambda: self.in_flight)
        self.stats.flush()
        self.budgets.warn_owed()  # the store never came back for them
        await self.close()
        log.info("stopped", extra={"event": "stopped"})

    async def refresh_health(self) -> bool:
        """Ping the store and publish the result to both health endpoints: NOT_SERVING while
        it fails with ``--health-follows-store``, and while no domain is loaded with
        ``--health-needs-rules`` (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: xDS may leave none).

        A ping that answers also closes an open circuit breaker: the store is back.
        """
        fault = await store_fault(self.store, PING_TIMEOUT_S)
        alive = fault is None
        serving = self.health.decide(fault, bool(self.config.domains))  # logs each change
        if alive and self.service.breaker is not None:
            self.service.breaker.recovered()  # the ping was a probe: no need to wait it out
        await self.grpc.set_serving(serving and not self._draining)
        if alive and self.budgets.owes():  # after the health is out: paying takes a while
            await self.budgets.pay_owed()  # spent while the store was down
        return serving

    async def _health_loop(self) -> None:
        """``refresh_health`` every ``--health-interval``, and at once when the rules change
        what ``--health-needs-rules`` looks at (health.py)."""
        while True:
            # Not wait_for: it swallows a cancellation that comes as the event is set.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.health_interval):
                    await self._rules_changed.wait()
            self._rules_changed.clear()
            await self.refresh_health()

    def _apply(self, config: rules.RateLimitConfig) -> None:
        if self.health.needs_rules and bool(config.domains) != bool(self.config.domains):
            self._rules_changed.set()
        self.service.swap_config(config)
        if self.quota is not None:
            self.quota.send(self.quota.quota.swap_config(config))
            self.quota.refusing = None
        self.config = config
        self.rules_loaded = True
        if self.config_applied is not None:
            self.config_applied()

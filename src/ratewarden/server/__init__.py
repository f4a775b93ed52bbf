"""The Envoy global rate limit service (``envoy.service.ratelimit.v3``).

- ``config``: envoyproxy/ratelimit YAML (unchanged) plus ratewarden's extensions,
  loaded into frozen, validated rules. Pure: it reads the files it is given and
  nothing else.
- ``service``: ``RateLimitService`` / ``AsyncRateLimitService``, the
  transport-agnostic ``ShouldRateLimit``: a request message in, a response
  message out, decided through a ``Limiter`` / ``AsyncLimiter`` over any store.
  Its parts: ``descriptors`` (a request's descriptors, keys and results),
  ``joint_step`` (several descriptors in one atomic store step),
  ``response`` (the response and the outcomes given to hooks), ``statuses``
  (Envoy's units both ways), ``value_cap`` (``max_values_per_rule``), ``hooks``
  (``ServiceHooks`` and the service's log lines), ``headers`` (response headers)
  and ``budget_service`` (token budgets over Envoy's protocol).
- ``ratewarden serve``: ``app`` (the composition root: settings in, a running
  server out; the only module here that builds a store), ``settings`` /
  ``options`` / ``store_url`` / ``rules_source`` (its settings, flags and environment),
  ``command`` (the command line's parser, in sections, and its refusals), ``logs``,
  ``grpc`` and ``http`` (the transports), ``listeners`` (their ports), ``store_check``
  (the store's health), ``unknown_domains`` (the bounded warning about domains no rule
  file defines), ``reload``, ``stats`` and ``dashboard``.

Importing this package imports neither gRPC nor protobuf.
"""

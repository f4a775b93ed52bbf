"""The Envoy global rate limit service (``envoy.service.ratelimit.v3``).

- ``config``: envoyproxy/ratelimit YAML (unchanged) plus ratewarden's extensions,
  loaded into frozen, validated rules. Pure: it reads the files it is given and
  nothing else.
- ``service``: ``RateLimitService`` / ``AsyncRateLimitService``, the
  transport-agnostic ``ShouldRateLimit``: a request message in, a response
  message out, over any store.

Importing this package imports neither gRPC nor protobuf.
"""

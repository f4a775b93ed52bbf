"""Moved to ``ratewarden.limiter``; kept until the middleware imports it from there."""

from ratewarden.limiter import CircuitBreaker

__all__ = ["CircuitBreaker"]

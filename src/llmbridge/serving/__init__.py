"""Calling models, the way every product does: backends and routes configured, the
router, the resilience policy, request preparation and one ``chat`` with retries,
fallbacks and the circuit breaker. No transport: the gateway, the agent, the profiler
and the CLI all call models through here (docs/ARCHITECTURE.md)."""

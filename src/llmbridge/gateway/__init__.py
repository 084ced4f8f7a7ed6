"""The ASGI gateway: routes per dialect, model routing, auth, limits, health, metrics."""

"""HTTP plumbing shared by the gateway and the agent's HTTP API (Starlette): bodies read
within limits, errors rendered in the caller's dialect, disconnect-aware streaming,
API keys and the caller's identity. No routes and no application here."""

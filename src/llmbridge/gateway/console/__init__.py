"""The operator console: the gateway's web UI under ``/ui/``.

Served by the gateway itself on its own port, with nothing fetched from the internet:
its templates (Jinja2) and static files (its CSS, a small script, and htmx 2, vendored
with its licence) ship in the package. Modules:

- ``session``: the signed, expiring session cookie and the CSRF token of its forms;
- ``web``: templates, security headers (a strict CSP), forms, error pages, the gate every page goes
  through (no master key, no session, a cross-site or token-less POST);
- ``pages``: sign-in and out, keys (the admin API's checks and store), backends and
  routes, static files, and ``routes``, every ``/ui/`` route;
- ``log_pages``: the pages over the request log (accounts/request_log.py): overview,
  requests and their detail, client sessions;
- ``status``: what the backends page reads from the gateway's state;
- ``charts``: server-drawn SVG charts with axes and units.

docs/CONSOLE.md says how to use it and what it keeps.
"""

from llmbridge.gateway.console.pages import routes

__all__ = ["routes"]

"""Whether a host name or URL names this machine.

One answer for every place that asks: the gateway's start (no auth is fine on loopback
only) and the OpenCode backend (a provider on this machine gets a local model's longer
deadlines). ``localhost`` and its subdomains (RFC 6761), 127.0.0.0/8 and ``::1``.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["is_loopback_host", "is_loopback_url"]


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_url(url: str) -> bool:
    """Whether ``url``'s host is this machine."""
    host = urlsplit(url).hostname
    return host is not None and is_loopback_host(host)

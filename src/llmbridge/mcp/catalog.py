"""What the gateway's MCP endpoints list, and where a name leads: ``Catalog``.

A **view** is one endpoint: ``/mcp`` (``view=None``: every server) or
``/mcp/<server>`` (that server alone). In ``/mcp`` tools and prompts are named
``<server>__<name>`` (``SEPARATOR``), in the order the servers are configured, so two
servers may both have a ``search`` tool; in ``/mcp/<server>`` they keep their own
names. Resources keep their URIs everywhere (a URI names what it is; ``file:///...``
means the same to a client whichever server serves it): a read goes to the server that
listed that URI, else to the first whose resource template matches it. What a key
may see is the caller's to say (``allowed``, ``reaches``: mcp/permissions.py).

Only servers that are up are listed; a server that comes up, goes down or says its
list changed makes the gateway send list-changed notifications (mcp/listeners.py).

Pages: every list is cut into pages of ``mcp.page_size`` items; ``nextCursor`` is the
next page's offset, opaque to clients (``page``). A cursor the gateway did not make
is a 400 (``-32602``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

import mcp_types as types
from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

from llmbridge.core.errors import InvalidRequestError, NotFoundError
from llmbridge.mcp.upstream import Upstream

__all__ = ["SEPARATOR", "Catalog", "exposed", "page"]

SEPARATOR = "__"
"""Between a server's name and its tool's or prompt's in ``/mcp``."""

T = TypeVar("T")

_CURSOR_PREFIX = "llmb:"


def exposed(server: str, name: str) -> str:
    """The name ``/mcp`` gives the server's tool or prompt ``name``."""
    return f"{server}{SEPARATOR}{name}"


def page(items: Sequence[T], cursor: str | None, size: int) -> tuple[list[T], str | None]:
    """One page of ``items`` from ``cursor`` and the next page's cursor (``None`` at
    the end); ``InvalidRequestError`` for a cursor this function did not make."""
    start = 0
    if cursor:
        try:
            decoded = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("ascii")
            if not decoded.startswith(_CURSOR_PREFIX):
                raise ValueError(decoded)
            start = int(decoded.removeprefix(_CURSOR_PREFIX))
            if start < 0:
                raise ValueError(decoded)
        except (ValueError, UnicodeError, binascii.Error):
            raise InvalidRequestError(
                "cursor: not a cursor this gateway gave (pass nextCursor as it came)",
                param="cursor",
            ) from None
    end = start + size
    following = None
    if end < len(items):
        following = base64.urlsafe_b64encode(f"{_CURSOR_PREFIX}{end}".encode()).decode("ascii")
    return list(items[start:end]), following


class Catalog:
    """The upstreams' listings as the endpoints show them (module docstring)."""

    def __init__(self, upstreams: Mapping[str, Upstream]) -> None:
        self.upstreams = upstreams

    def _serving(self, view: str | None) -> Iterator[Upstream]:
        if view is None:
            servers: Sequence[Upstream] = list(self.upstreams.values())
        else:
            servers = [self.upstreams[view]]
        for upstream in servers:
            if upstream.state == "up":
                yield upstream

    def tools(self, view: str | None, allowed: Callable[[str], bool]) -> list[types.Tool]:
        """The tools ``view`` lists to a key that may use those ``allowed`` (called
        with the ``<server>__<tool>`` name)."""
        found: list[types.Tool] = []
        for upstream in self._serving(view):
            for tool in upstream.listing.tools:
                name = exposed(upstream.name, tool.name)
                if allowed(name):
                    renamed = tool if view is not None else tool.model_copy(update={"name": name})
                    found.append(renamed)
        return found

    def tool(self, view: str | None, name: str) -> tuple[Upstream, str]:
        """The server and the server's own name of the tool ``view`` calls ``name``;
        ``NotFoundError`` (``-32602``, as the specification says of an unknown tool)
        when there is none, naming what does exist only by its server. A tool of a
        server that is down is found (its call says the server is down) when the
        server listed it before."""
        upstream, own = self._split(view, name, "tool")
        if not any(tool.name == own for tool in upstream.listing.tools):
            raise NotFoundError(f"unknown tool: {name!r}", param="name", code="unknown_tool")
        return upstream, own

    def input_schema(self, view: str | None, name: str) -> dict[str, object] | None:
        """The input schema of the tool ``view`` calls ``name`` (the SDK checks the
        2026-07-28 revision's ``Mcp-Param-*`` headers against it), if there is one."""
        try:
            upstream, own = self._split(view, name, "tool")
        except NotFoundError:
            return None
        for tool in upstream.listing.tools:
            if tool.name == own:
                return dict(tool.input_schema)
        return None

    def prompts(self, view: str | None, allowed: Callable[[str], bool]) -> list[types.Prompt]:
        """The prompts ``view`` lists to a key that may get those ``allowed`` (called
        with the ``<server>__<prompt>`` name)."""
        found: list[types.Prompt] = []
        for upstream in self._serving(view):
            for prompt in upstream.listing.prompts:
                name = exposed(upstream.name, prompt.name)
                if not allowed(name):
                    continue
                if view is None:
                    prompt = prompt.model_copy(update={"name": name})
                found.append(prompt)
        return found

    def prompt(self, view: str | None, name: str) -> tuple[Upstream, str]:
        upstream, own = self._split(view, name, "prompt")
        if not any(prompt.name == own for prompt in upstream.listing.prompts):
            raise NotFoundError(f"unknown prompt: {name!r}", param="name", code="unknown_prompt")
        return upstream, own

    def resources(self, view: str | None, reaches: Callable[[str], bool]) -> list[types.Resource]:
        """The resources of the servers of ``view`` that ``reaches`` (called with the
        server's name) lets the key see."""
        return [
            resource
            for upstream in self._serving(view)
            if reaches(upstream.name)
            for resource in upstream.listing.resources
        ]

    def templates(
        self, view: str | None, reaches: Callable[[str], bool]
    ) -> list[types.ResourceTemplate]:
        """The resource templates of the servers of ``view`` that ``reaches``."""
        return [
            template
            for upstream in self._serving(view)
            if reaches(upstream.name)
            for template in upstream.listing.templates
        ]

    def resource(self, view: str | None, uri: str, reaches: Callable[[str], bool]) -> Upstream:
        """The server that serves the resource ``uri`` in ``view`` (module docstring),
        one that ``reaches`` lets the key read first: another only when none of those
        serves it (the caller then refuses it)."""
        serving = list(self._serving(view))
        reached = [upstream for upstream in serving if reaches(upstream.name)]
        return self._resource(reached, uri) or self._resource(serving, uri) or self._unknown(uri)

    @staticmethod
    def _resource(servers: Sequence[Upstream], uri: str) -> Upstream | None:
        for upstream in servers:
            if any(resource.uri == uri for resource in upstream.listing.resources):
                return upstream
        for upstream in servers:
            for template in upstream.listing.templates:
                try:
                    if UriTemplate.parse(template.uri_template).match(uri) is not None:
                        return upstream
                except InvalidUriTemplate:
                    continue
        return None

    @staticmethod
    def _unknown(uri: str) -> Upstream:
        raise NotFoundError(f"unknown resource: {uri!r}", param="uri", code="unknown_resource")

    def _split(self, view: str | None, name: str, what: str) -> tuple[Upstream, str]:
        """The server and own name of ``name`` in ``view``."""
        if view is not None:
            return self.upstreams[view], name
        server, separator, own = name.partition(SEPARATOR)
        upstream = self.upstreams.get(server)
        if not separator or upstream is None or not own:
            raise NotFoundError(
                f"unknown {what}: {name!r} (in /mcp a {what} is named "
                f"<server>{SEPARATOR}<{what}>; the servers: {', '.join(self.upstreams)})",
                param="name",
                code=f"unknown_{what}",
            )
        return upstream, own

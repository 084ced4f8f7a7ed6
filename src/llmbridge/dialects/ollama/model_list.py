"""Ollama's model endpoints <-> ``ModelInfo``: ``/api/tags``, ``/api/show``, ``/api/ps``.

What Ollama reports beyond the fields ``ModelInfo`` models is kept in
``ModelInfo.details`` under Ollama's own names, so a model listed by a real Ollama
server is shown to clients as Ollama showed it: ``model_info``, ``parameters``,
``license``, ``modelfile``, ``system``, ``renderer``, ``parser``, ``messages``,
``projector_info``, ``requires``, ``parent_model``, ``families``, ``remote_model``,
``remote_host``, ``expires_at``, ``size_vram``, and the capabilities the core does not
model (``image``, ``audio``) under ``capabilities``.

A model whose backend gave no template but can call tools is shown with a stand-in
template in Ollama's form (``template.py`` says why clients need one); a real Ollama
server's template goes through unchanged.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.model_info import Capability, ModelInfo
from llmbridge.dialects.fields import int_or_none, nonempty_str, object_or_empty
from llmbridge.dialects.ollama.template import stand_in_template
from llmbridge.dialects.ollama.types import parse_rfc3339, rfc3339

__all__ = ["decode_show", "decode_tags", "encode_ps", "encode_show", "encode_tags"]

# Ollama's order (types/model/capability.go), so listings read as Ollama's do.
_CAPABILITIES: tuple[Capability, ...] = (
    "completion",
    "tools",
    "insert",
    "vision",
    "embedding",
    "thinking",
)
_OTHER_CAPABILITIES = ("image", "audio")
"""Ollama's capabilities the core does not model, in Ollama's order after the others:
kept from a real Ollama server's reply and shown again as it sent them."""
_DEFAULT_CAPABILITIES: frozenset[Capability] = frozenset({"completion"})
# Keys of ``details`` copied between ModelInfo.details and a listing entry.
_REMOTE_KEYS = ("remote_model", "remote_host")
_ENTRY_KEYS = (*_REMOTE_KEYS, "expires_at", "size_vram")
_DETAIL_KEYS = ("parent_model", "families")
_SHOW_KEYS = ("model_info", "parameters", "license", "modelfile", "system")
# Fields of a real Ollama server's /api/show reply shown again only when it sent them
# (Ollama omits each when empty), after ``capabilities``'s neighbours in its order.
_SHOW_OPTIONAL = ("renderer", "parser", "messages", *_REMOTE_KEYS)
_SHOW_TRAILING = ("projector_info",)
_SHOW_LAST = ("requires",)
_KEEP_ALIVE_S = 300.0
"""Ollama's default keep_alive, for ``expires_at`` when nothing better is known."""


# -- encoding -------------------------------------------------------------------------


def encode_tags(models: list[ModelInfo]) -> dict[str, Any]:
    """The ``/api/tags`` reply listing ``models``."""
    now = time.time()
    return {"models": [_entry(info, now) for info in models]}


def encode_ps(models: list[ModelInfo]) -> dict[str, Any]:
    """The ``/api/ps`` reply: ``models`` as loaded models."""
    now = time.time()
    entries = []
    for info in models:
        entry: dict[str, Any] = {
            "name": info.name,
            "model": info.name,
            "size": info.size or 0,
            "digest": info.digest or _digest(info.name),
            "details": _details(info),
            "expires_at": info.details.get("expires_at") or rfc3339(now + _KEEP_ALIVE_S),
            "size_vram": info.details.get("size_vram") or 0,
        }
        if info.context_length is not None:
            entry["context_length"] = info.context_length
        entries.append(entry)
    return {"models": entries}


def encode_show(info: ModelInfo) -> dict[str, Any]:
    """The ``/api/show`` reply for one model.

    ``model_info`` gets ``<architecture>.context_length`` (the key clients read the
    context window from), the architecture being ``general.architecture``, else the
    family, else ``general``.
    """
    details = info.details
    model_info: dict[str, Any] = dict(details.get("model_info") or {})
    if info.family:
        model_info.setdefault("general.architecture", info.family)
    if info.context_length is not None:
        architecture = model_info.get("general.architecture")
        if not isinstance(architecture, str) or not architecture:
            architecture = info.family or "general"
        for key in [k for k in model_info if k.endswith(".context_length")]:
            del model_info[key]  # a stale window would contradict ours
        model_info[f"{architecture}.context_length"] = info.context_length
    capabilities = _capability_list(info)
    template = info.template or ""
    if not template and "tools" in capabilities:
        template = stand_in_template(capabilities)
    body: dict[str, Any] = {
        "license": details.get("license") or "",
        "modelfile": details.get("modelfile") or f"FROM {info.name}\n",
        "parameters": details.get("parameters") or "",
        "template": template,
    }
    if details.get("system"):
        body["system"] = details["system"]
    body.update((key, details[key]) for key in _SHOW_OPTIONAL if details.get(key))
    body["details"] = _details(info)
    body["model_info"] = model_info
    body.update((key, details[key]) for key in _SHOW_TRAILING if details.get(key))
    body["capabilities"] = capabilities
    body["modified_at"] = rfc3339(info.modified_at if info.modified_at is not None else time.time())
    body.update((key, details[key]) for key in _SHOW_LAST if details.get(key))
    return body


def _entry(info: ModelInfo, now: float) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": info.name,
        "model": info.name,
        "modified_at": rfc3339(info.modified_at if info.modified_at is not None else now),
        "size": info.size or 0,
        "digest": info.digest or _digest(info.name),
        "details": _details(info),
        "capabilities": _capability_list(info),
    }
    for key in _REMOTE_KEYS:
        if info.details.get(key):
            entry[key] = info.details[key]
    return entry


def _details(info: ModelInfo) -> dict[str, Any]:
    families = info.details.get("families") or ([info.family] if info.family else None)
    return {
        "parent_model": info.details.get("parent_model") or "",
        "format": info.format or "",
        "family": info.family or "",
        "families": families,
        "parameter_size": info.parameter_size or "",
        "quantization_level": info.quantization_level or "",
    }


def _capability_list(info: ModelInfo) -> list[str]:
    listed: list[str] = [cap for cap in _CAPABILITIES if cap in info.capabilities]
    others = info.details.get("capabilities")
    if isinstance(others, list):
        listed.extend(cap for cap in _OTHER_CAPABILITIES if cap in others)
    return listed


def _digest(name: str) -> str:
    # Ollama digests are sha256 hex; clients expect one. A stable stand-in per name.
    return hashlib.sha256(name.encode()).hexdigest()


# -- decoding -------------------------------------------------------------------------


def decode_tags(body: object) -> list[ModelInfo]:
    """A real Ollama ``/api/tags`` (or ``/api/ps``) reply as ``ModelInfo`` values.

    ``backend_model`` is the listed name; ``backend`` is left for the caller to set.

    Raises:
        BackendProtocolError: ``models`` is missing or an entry has no name.
    """
    entries = body.get("models") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        raise BackendProtocolError("Ollama's tags reply has no 'models' list")
    models = []
    for entry in entries:
        name = (entry.get("name") or entry.get("model")) if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(name, str) or not name:
            raise BackendProtocolError(f"Ollama listed a model without a name: {entry!r:.200}")
        wire_details = object_or_empty(entry.get("details"))
        extra = {key: wire_details[key] for key in _DETAIL_KEYS if wire_details.get(key)}
        extra.update((key, entry[key]) for key in _ENTRY_KEYS if entry.get(key))
        extra.update(_other_capabilities(entry.get("capabilities")))
        models.append(
            ModelInfo(
                name=name,
                backend_model=name,
                capabilities=_capabilities(entry.get("capabilities")),
                # /api/ps has it beside the details; newer /api/tags inside them.
                context_length=int_or_none(entry.get("context_length"))
                or int_or_none(wire_details.get("context_length")),
                family=nonempty_str(wire_details.get("family")),
                parameter_size=nonempty_str(wire_details.get("parameter_size")),
                quantization_level=nonempty_str(wire_details.get("quantization_level")),
                format=nonempty_str(wire_details.get("format")),
                size=int_or_none(entry.get("size")),
                digest=nonempty_str(entry.get("digest")),
                modified_at=parse_rfc3339(entry.get("modified_at")),
                details=extra,
            )
        )
    return models


def decode_show(name: str, body: object) -> ModelInfo:
    """A real Ollama ``/api/show`` reply for the model ``name``.

    The context window is read from ``model_info``'s ``<architecture>.context_length``.

    Raises:
        BackendProtocolError: the body is not a JSON object.
    """
    if not isinstance(body, dict):
        raise BackendProtocolError("Ollama's show reply is not a JSON object")
    wire_details = object_or_empty(body.get("details"))
    model_info = object_or_empty(body.get("model_info"))
    architecture = nonempty_str(model_info.get("general.architecture"))
    extra = {key: body[key] for key in _SHOW_KEYS if body.get(key)}
    extra.update(
        (key, body[key]) for key in (*_SHOW_OPTIONAL, *_SHOW_TRAILING, *_SHOW_LAST) if body.get(key)
    )
    extra.update((key, wire_details[key]) for key in _DETAIL_KEYS if wire_details.get(key))
    extra.update(_other_capabilities(body.get("capabilities")))
    return ModelInfo(
        name=name,
        backend_model=name,
        capabilities=_capabilities(body.get("capabilities")),
        context_length=_context_length(model_info, architecture),
        family=nonempty_str(wire_details.get("family")) or architecture,
        parameter_size=nonempty_str(wire_details.get("parameter_size")),
        quantization_level=nonempty_str(wire_details.get("quantization_level")),
        format=nonempty_str(wire_details.get("format")),
        modified_at=parse_rfc3339(body.get("modified_at")),
        template=nonempty_str(body.get("template")),
        details=extra,
    )


def _context_length(model_info: dict[str, Any], architecture: str | None) -> int | None:
    if architecture is not None:
        exact = int_or_none(model_info.get(f"{architecture}.context_length"))
        if exact is not None:
            return exact
    for key, value in model_info.items():
        if key.endswith(".context_length") and int_or_none(value) is not None:
            return int_or_none(value)
    return None


def _other_capabilities(value: object) -> dict[str, list[str]]:
    """The capabilities the core does not model, as ``details`` keeps them."""
    if not isinstance(value, list):
        return {}
    others = [cap for cap in _OTHER_CAPABILITIES if cap in value]
    return {"capabilities": others} if others else {}


def _capabilities(value: object) -> frozenset[Capability]:
    if not isinstance(value, list):
        return _DEFAULT_CAPABILITIES
    # Capabilities the core does not model (``image``, ``audio``) are left out.
    known = frozenset(cap for cap in _CAPABILITIES if cap in value)
    return known or _DEFAULT_CAPABILITIES

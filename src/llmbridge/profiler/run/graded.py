"""The optional model-graded scanner: a model reads each iteration's transcript and says
what went wrong, beside the deterministic findings. Off by
default; ``profile run --grade-model MODEL`` turns it on.

The model is asked through the gateway (``--gateway-url``), as any OpenAI client asks
it: one chat completion per iteration, at temperature 0, with a JSON schema as the
``response_format`` (the gateway constrains the embedded model to it, as tool
emulation's decisions are constrained), for ``{"findings": [{"kind", "message"}]}``.
The transcript it reads is compact and bounded (``TRANSCRIPT_CHARS``): each prompt, each
tool call with its arguments and whether it failed, the final text of each reply. Each
answer becomes findings of kind ``graded`` whose message starts with the model's own
kind. A grader that fails (no gateway, an error, an answer that is not the JSON asked
for) adds nothing and says why in the log: the run's other results stand.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import json_repair

from llmbridge.profiler.records.findings import Finding
from llmbridge.profiler.records.records import IterationRecord

__all__ = ["GRADER_SCHEMA", "Grader", "transcript_of"]

log = logging.getLogger("llmbridge.profiler")

TRANSCRIPT_CHARS = 6000
"""The most of a transcript the grader reads (its end is kept: where sessions fail)."""
MAX_FINDINGS = 5

GRADER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "findings": {
            "type": "array",
            "maxItems": MAX_FINDINGS,
            "items": {
                "type": "object",
                "properties": {"kind": {"type": "string"}, "message": {"type": "string"}},
                "required": ["kind", "message"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["findings"],
    "additionalProperties": False,
}

_INSTRUCTIONS = (
    "You review a coding or chat agent's session. List what went wrong in it, if "
    "anything: wrong answers, ignored instructions, unsafe actions, giving up, loops, "
    "wasted steps. Each finding: a short kind (one or two words) and one sentence. No "
    "finding when nothing went wrong. Answer with JSON only."
)


def transcript_of(record: IterationRecord) -> str:
    """The iteration as the grader reads it (module docstring)."""
    lines: list[str] = []
    events = (record.trace or {}).get("events") or []
    failed = {e.get("call_id") for e in events if e.get("type") == "error" and e.get("call_id")}
    for n, prompt in enumerate(record.prompts):
        if n < len(record.inputs):
            lines.append(f"USER: {record.inputs[n]}")
        lines.append(f"AGENT ({prompt.completion_reason}): {prompt.text}")
    calls = [
        f"TOOL {e.get('tool')} {json.dumps(e.get('arguments'), default=str)[:200]}"
        + (" -> FAILED" if e.get("call_id") in failed else "")
        for e in events
        if e.get("type") == "tool_call"
    ]
    if calls:
        lines.append("TOOL CALLS, in order:")
        lines += calls
    if record.error:
        lines.append(f"ERROR: {record.error}")
    text = "\n".join(lines)
    return text if len(text) <= TRANSCRIPT_CHARS else "…" + text[-TRANSCRIPT_CHARS:]


class Grader:
    """Asks ``model`` through the gateway at ``gateway_url`` (module docstring)."""

    def __init__(
        self, gateway_url: str, model: str, *, api_key: str = "llmbridge", timeout: float = 120
    ) -> None:
        self.url = gateway_url.rstrip("/") + "/v1/chat/completions"
        self.model = model
        self.headers = {"authorization": f"Bearer {api_key}"}
        self.timeout = timeout

    async def grade(self, record: IterationRecord) -> list[Finding]:
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": _INSTRUCTIONS},
                {"role": "user", "content": transcript_of(record)},
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "findings", "schema": GRADER_SCHEMA, "strict": True},
            },
        }
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                reply = await client.post(self.url, json=body, headers=self.headers)
            reply.raise_for_status()
            content = reply.json()["choices"][0]["message"]["content"] or ""
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            log.warning("the grader (%s) could not grade %s: %s", self.model, record.key, exc)
            return []
        answer = json_repair.loads(content)
        items = answer.get("findings") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            log.warning("the grader's answer for %s is not the JSON asked for", record.key)
            return []
        return [
            Finding("graded", f"{item.get('kind', '?')}: {item.get('message', '')}", (self.model,))
            for item in items[:MAX_FINDINGS]
            if isinstance(item, dict) and str(item.get("message") or "").strip()
        ]

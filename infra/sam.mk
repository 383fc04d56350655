# SAM targets, included by the top-level Makefile (which defines PYTHON, BIN and STAMP_PY).
#   make lint-template   cfn-lint and `sam validate --lint`, offline
#   make sam-build       build the deployment package into .aws-sam/ (no container)
# `sam build` runs `build-<LogicalId>` for functions with `BuildMethod: makefile`.

SAM_VENV := .tools/sam
SAM := $(SAM_VENV)/bin/sam
STAMP_SAM := $(SAM_VENV)/.installed
# Offline and without credentials: sam needs a region, and telemetry would only try the network.
SAM_ENV := AWS_DEFAULT_REGION=us-east-1 SAM_CLI_TELEMETRY=0

# Must match `Architectures` in template.yaml (tests/integration/test_template.py checks it).
SAM_PIP_ARCH := x86_64
# The python3.12 runtime runs on Amazon Linux 2023 (glibc 2.34): accept wheels built for that glibc or older.
SAM_PIP_PLATFORMS := $(foreach tag,manylinux2014 manylinux_2_28 manylinux_2_34,--platform $(tag)_$(SAM_PIP_ARCH))

# Bytecode is specific to the interpreter version, so the package is compiled by a real python3.12: one on PATH, else
# pyenv's newest 3.12 (a pyenv shim on PATH fails unless PYENV_VERSION names 3.12). Resolved once, only when used.
ifeq ($(origin PYTHON312),undefined)
PYTHON312 = $(eval PYTHON312 := $(shell python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null \
	|| PYENV_VERSION=$$(pyenv latest 3.12 2>/dev/null) pyenv exec python3.12 -c 'import sys; print(sys.executable)' \
	2>/dev/null))$(PYTHON312)
endif

.PHONY: lint-template sam-build build-GatewayFunction build-MetadataFunction build-DiscoveryFunction

# SAM CLI lives in its own virtualenv: installed into .venv it downgrades boto3 and pydantic.
$(STAMP_SAM):
	@test -x $(SAM_VENV)/bin/python || $(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/python -m pip install --quiet 'aws-sam-cli>=1.170,<2'
	@touch $@

lint-template: $(STAMP_PY) $(STAMP_SAM)
	$(BIN)/cfn-lint template.yaml
	$(SAM_ENV) $(SAM) validate --lint --template-file template.yaml

# --build-in-source skips SAM's copy of the whole source tree (CodeUri is `.`, so the copy would include .venv and
# node_modules); build-GatewayFunction works from either place.
sam-build: $(STAMP_SAM) $(STAMP_MODEL)
	@test -n "$(PYTHON312)" || { echo 'sam-build: no python3.12 found (on PATH or in pyenv)' >&2; exit 1; }
	$(SAM_ENV) PYTHON312=$(PYTHON312) $(SAM) build --build-in-source --template-file template.yaml \
		--build-dir .aws-sam/build

# Runs with the working directory at the project root or SAM's copy of it; ARTIFACTS_DIR comes from SAM.
# Bytecode uses unchecked-hash: the zip SAM uploads keeps mtimes only to 2 s, which would invalidate timestamp-checked
# .pyc files, and /var/task is read-only, so Python would recompile on every cold start.
# Every function ships the same package (satellite plus its dependencies) and differs only in its Handler.
build-GatewayFunction build-MetadataFunction build-DiscoveryFunction:
	@test -n "$(ARTIFACTS_DIR)" || { echo '$@: ARTIFACTS_DIR is not set (run sam build)' >&2; exit 1; }
	@test -n "$(PYTHON312)" || { echo '$@: no python3.12 found (on PATH or in pyenv)' >&2; exit 1; }
	requirements=$$(mktemp) && trap 'rm -f "$$requirements"' EXIT && \
	$(PYTHON312) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
		> "$$requirements" && \
	$(PYTHON312) -m pip install --quiet --disable-pip-version-check --no-compile --upgrade \
		--requirement "$$requirements" --target "$(ARTIFACTS_DIR)" \
		--only-binary=:all: --python-version 3.12 --implementation cp $(SAM_PIP_PLATFORMS)
	tar --create --exclude=__pycache__ satellite functions | tar --extract --directory "$(ARTIFACTS_DIR)"
	$(PYTHON312) -m compileall -q -j 0 --invalidation-mode unchecked-hash "$(ARTIFACTS_DIR)"

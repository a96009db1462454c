# Skinflint: the two set-up commands are `make demo` and `make test` (see README.md).
# Both create .venv and install the project on first use; nothing else needs installing by hand.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: demo test lint install clean synth lambda-deps worker-deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## The main job on the embedded default (moto on 127.0.0.1 + local workers; no AWS account).
demo: $(STAMP)
	$(BIN)/skinflint demo $(ARGS)

## Style, format, types and the layer contracts (import-linter, pyproject.toml [tool.importlinter]).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy planner core front control functions workers skinflint profiles cdk loadtest bench
	$(BIN)/lint-imports

## Lint, type-check and run every test (what .ci/run calls).
test: lint
	$(BIN)/pytest -q

## CDK: synthesize every stack offline into cdk.out/ (no AWS account, no Docker needed).
synth: $(STAMP)
	$(BIN)/python app.py

## Dependencies for deployment assets (see docs/deploy.md): the Lambda layer and the worker wheelhouse.
lambda-deps: $(STAMP)
	$(BIN)/python -m cdk.deps lambda

worker-deps: $(STAMP)
	$(BIN)/python -m cdk.deps worker

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache cdk.out

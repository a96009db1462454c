# Skinflint: the two set-up commands are `make demo` and `make test` (see README.md).
# Both create .venv and install the project on first use; nothing else needs installing by hand.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: demo test lint install clean synth lambda-deps worker-deps checkov

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
	$(MAKE) checkov

## checkov on the synthesized templates (findings acknowledged with reasons in cdk/checkov.py). In a
## venv of its own: checkov pins boto3/botocore 1.35, packaging 23.2 and networkx 2.6, below the
## project's, so it is no dev dependency.
CHECKOV_VENV := .venv-checkov
CHECKOV_VERSION := 3.3.30
$(CHECKOV_VENV)/.installed:
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet 'checkov==$(CHECKOV_VERSION)'
	touch $@

checkov: $(STAMP) $(CHECKOV_VENV)/.installed
	$(BIN)/python app.py
	$(CHECKOV_VENV)/bin/checkov -d cdk.out --framework cloudformation --skip-download --quiet --compact
	CDK_OUTDIR=cdk.out.rest $(BIN)/python app.py -c front_api=rest   # the REST API + WAF variant
	$(CHECKOV_VENV)/bin/checkov -d cdk.out.rest --framework cloudformation --skip-download --quiet --compact

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
	rm -rf $(VENV) $(CHECKOV_VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache cdk.out cdk.out.rest

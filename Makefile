# xfuse: set-up, demo, tests. Needs Python >= 3.11, gcc and pip on the machine; the set-up also
# tries to install Graphviz (best effort: without it, fusion pictures are written as DOT text).
# `make demo` and `make test` create .venv on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, pinned: a bare `torch` requirement makes pip fetch a multi-GB CUDA build. The
# model zoo's transformers (the `models` extra) comes in the same command, so torch stays pinned.
TORCH := torch==2.13.0
MODELS := transformers==5.24.0

.PHONY: demo test pytest lit lint setup clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(TORCH) $(MODELS)
	$(BIN)/python -m pip install -e '.[dev]'
	# Graphviz renders fusion pictures; best effort: without it they are written as DOT text.
	-command -v dot || (apt-get update && apt-get install -y graphviz) || echo "graphviz not installed: DOT text only"
	touch $@

demo: setup
	$(BIN)/python -m examples.demo

# The sample IR that the README's Python API reads: the bundled MLP, imported (text, no weights).
examples/mlp.mlir: examples/mlp.py examples/to_mlir.py | setup
	$(BIN)/python -m examples.to_mlir mlp > $@.tmp && mv $@.tmp $@

# Both suites run; the target fails if either fails.
test: setup
	status=0; \
	$(MAKE) --no-print-directory pytest || status=1; \
	$(MAKE) --no-print-directory lit || status=1; \
	exit $$status

pytest: setup
	$(BIN)/python -m pytest -q tests

lit: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/lit -sv filecheck/

lint: setup
	$(BIN)/ruff check xfuse tests examples
	$(BIN)/ruff format --check xfuse tests examples
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
	find filecheck -name Output -type d -prune -exec rm -rf {} +

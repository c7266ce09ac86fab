# Quickstart: `make demo` (estimate a bundled model on the CPU) and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.memfit-installed

.PHONY: demo test lint typecheck check clean test-cpu-build test-frameworks

# `make demo` installs what the demo needs; `make test` adds the test, lint and type tools.
$(STAMP): pyproject.toml
	@echo "memfit: creating $(VENV) and installing memfit with torch, transformers, torchvision,"
	@echo "        timm and matplotlib: about 6 GB (torch's CUDA build is most of it), a few"
	@echo "        minutes the first time. pip lists each package as it goes."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade --progress-bar off pip
	$(BIN)/python -m pip install --progress-bar off -e '.[models,plot]'
	touch $(STAMP)

TEST_STAMP := $(VENV)/.memfit-test-installed
$(TEST_STAMP): $(STAMP)
	@echo "memfit: adding the test, lint and type tools to $(VENV) (about 0.3 GB)"
	$(BIN)/python -m pip install --progress-bar off -e '.[models,plot,test]'
	touch $(TEST_STAMP)

demo: $(STAMP)
	@echo "memfit: estimating BERT-base training (batch 8 x 512 tokens) on this CPU, no GPU used"
	$(BIN)/memfit estimate bert-base-uncased --batch-size 8 --seq-len 512 --gpu 24GiB

test: $(TEST_STAMP)
	$(BIN)/python -m pytest -n 2 -q

lint: $(TEST_STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(TEST_STAMP)
	$(BIN)/mypy

check: lint typecheck test

# The same suite's CPU-only-torch part, on the CPU build of torch (no CUDA libraries at all).
VENV_CPU := .venv-cpu
$(VENV_CPU)/.memfit-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV_CPU)
	$(VENV_CPU)/bin/python -m pip install -q --upgrade pip
	$(VENV_CPU)/bin/python -m pip install -q 'torch==2.13.0' -e '.[test]' 'transformers>=4.57'
	touch $@

test-cpu-build: $(VENV_CPU)/.memfit-installed
	$(VENV_CPU)/bin/python -m pytest -n 2 -q

# What the suites above do not install: memfit.configure / stats / doctor with the real
# TensorFlow and JAX (CPU builds), and DeepSpeed's ZeRO traced and run on gloo processes
# (built without its kernels).
VENV_FW := .venv-frameworks
$(VENV_FW)/.memfit-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV_FW)
	$(VENV_FW)/bin/python -m pip install -q --upgrade pip
	DS_BUILD_OPS=0 $(VENV_FW)/bin/python -m pip install -q 'torch==2.13.0' \
		-e '.[test,cpu-frameworks,zero]' 'transformers>=4.57'
	touch $@

test-frameworks: $(VENV_FW)/.memfit-installed
	$(VENV_FW)/bin/python -m pytest -n 2 -q tests/monitor/test_frameworks_real.py \
		tests/monitor/test_configure.py tests/monitor/test_doctor.py tests/workload/test_zero.py

clean:
	rm -rf $(VENV) $(VENV_CPU) $(VENV_FW) build *.egg-info src/*.egg-info

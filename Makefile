# Quickstart: `make demo` (estimate a bundled model on the CPU) and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.memfit-installed

.PHONY: demo test lint typecheck check clean test-cpu-build test-frameworks

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[models,plot,nvml,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/memfit estimate bert-base-uncased --batch-size 8 --seq-len 512 --gpu 24GiB

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
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

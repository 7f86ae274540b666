# One command each for a fresh machine: `make demo` (the main job) and `make test`.
PYTHON ?= python3
export PATH := /usr/lib/ccache:$(PATH)
export MAX_JOBS ?= 2

.PHONY: setup test test-long demo bench asan

setup:  ## PyTorch 2.13.0 (CPU), test tools, and the C++ runtime build
	@command -v ccache >/dev/null 2>&1 || apt-get install -y -q ccache >/dev/null 2>&1 || true
	$(PYTHON) -m pip install -q torch==2.13.0 numpy pytest hypothesis expecttest matplotlib ninja
	$(PYTHON) -m pip install -q --no-build-isolation -e .

test: setup  ## the default suite (a few minutes)
	$(PYTHON) -m pytest -q tests

test-long: setup  ## every suite with many more random examples
	$(PYTHON) -m pytest -q --hypothesis-profile=long -m "long or not long" tests

demo: setup  ## moves tensors through every layout family and runs a model on the device
	$(PYTHON) -m torch_layouts demo

bench: setup  ## performance ratios against same-process baselines -> benchmarks/RESULTS.md
	$(PYTHON) benchmarks/run.py

# One command each for a fresh machine: `make demo` (the main job) and `make test`.
PYTHON ?= python3
export PATH := /usr/lib/ccache:$(PATH)
export MAX_JOBS ?= 2

.PHONY: setup test test-long demo bench asan

setup:  ## PyTorch 2.13.0 (CPU) first, then the package with its [test] and [lint] extras (pyproject.toml), built in place
	@command -v ccache >/dev/null 2>&1 || apt-get install -y -q ccache >/dev/null 2>&1 || true
	$(PYTHON) -m pip install -q torch==2.13.0 setuptools ninja
	$(PYTHON) -m pip install -q --no-build-isolation -e ".[test,lint]"

test: setup  ## the linter (ruff, configured in pyproject.toml), then the default suite (a few minutes)
	$(PYTHON) -m ruff check .
	$(PYTHON) -m pytest -q tests

test-long: setup  ## every suite with many more random examples
	$(PYTHON) -m pytest -q --hypothesis-profile=long -m "long or not long" tests

demo: setup  ## moves tensors through every layout family and runs a model on the device
	$(PYTHON) -m torch_layouts demo

bench: setup  ## performance ratios against same-process baselines (JSON: benchmarks/results.json; analysis: benchmarks/RESULTS.md)
	$(PYTHON) benchmarks/run.py

ASAN_DIR ?= /tmp/torch_layouts_asan
ASAN_RUN = LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0 PYTHONPATH=$(ASAN_DIR)

asan: setup  ## the runtime built with AddressSanitizer in $(ASAN_DIR) (never in place), then the fuzzers under it
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR)
	tar --exclude=./build --exclude='./torch_layouts/_C*.so' --exclude=./.git --exclude=./.hypothesis -cf - . \
		| tar -xf - -C $(ASAN_DIR)
	cd $(ASAN_DIR) && TORCH_LAYOUTS_ASAN=1 $(PYTHON) setup.py -q build_ext --inplace
	cd $(ASAN_DIR) && $(ASAN_RUN) TORCH_LAYOUTS_DEVICE_MEMORY=4MiB $(PYTHON) tests/asan_fuzz.py --iterations 5000 --seed 0
	cd $(ASAN_DIR) && $(ASAN_RUN) $(PYTHON) -m pytest -q -p no:cacheprovider tests/test_reliability_fuzz.py \
		tests/test_reliability_roundtrip.py tests/test_reliability_serialization.py

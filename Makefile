# make demo: set up .venv and run the embedded example.  make test: set up and run every test.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint fuzz fuzz-upstream fuzz-kernels bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/tour.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(STAMP) lint
	$(PY) -m pytest -n 2 tests

fuzz: $(STAMP)
	$(PY) -m minipallas.fuzz $(FUZZ_ARGS)

fuzz-upstream: $(STAMP)
	$(PY) -m minipallas.difftest.fuzz_upstream $(FUZZ_ARGS)

fuzz-kernels: $(STAMP)
	$(PY) -m minipallas.difftest.fuzz_kernels $(FUZZ_ARGS)

bench: $(STAMP)
	$(PY) bench/ir_bench.py
	$(PY) bench/discharge_bench.py
	$(PY) bench/vs_upstream.py
	$(PY) bench/kernels_bench.py

clean:
	rm -rf $(VENV) build *.egg-info

# make demo: set up .venv and run the embedded example.  make test: set up and run every test.
# Both install the exact versions in requirements.lock (make lock refreshes it).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LOCK := requirements.lock

.PHONY: bench-devices demo test test-explore test-latest lock lint docs docs-serve fuzz fuzz-upstream fuzz-kernels fuzz-tpu tpu-check tpu-params tpu-bench tpu-difftest bench mutate clean

# Every package pinned by the lock, nothing resolved afresh: --no-deps installs exactly the
# list, --no-build-isolation builds minipallas with the locked setuptools, pip check proves
# the list is complete and consistent.
$(STAMP): $(LOCK) setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-deps -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m pip check
	touch $(STAMP)

# The newest versions setup.cfg allows, resolved now, written to the lock with pip's own
# freeze (pip, setuptools and wheel included).
lock:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade pip setuptools wheel
	.venv-lock/bin/python -m pip install --quiet '.[test,docs]'
	printf '# Exact versions of every package make demo / make test install (make lock writes it).\n' > $(LOCK)
	.venv-lock/bin/python -m pip freeze --all --exclude minipallas >> $(LOCK)
	rm -rf .venv-lock

# Not in CI: the whole suite on the newest versions the pins allow, to see drift early.
test-latest:
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install --quiet --upgrade pip setuptools wheel
	.venv-latest/bin/python -m pip install --quiet --upgrade -e '.[test,docs]'
	.venv-latest/bin/python -m pip freeze --all --exclude minipallas > .venv-latest/versions.txt
	@echo "versions that differ from the lock (< lock, > latest):"
	@grep -v '^#' $(LOCK) | diff - .venv-latest/versions.txt || true
	.venv-latest/bin/python -m pytest -n 2 tests

demo: $(STAMP)
	$(PY) examples/tour.py
	@echo "minipallas is installed in $(VENV): 'source $(VENV)/bin/activate' puts python, minipallas-opt and minipallas-difftest on the PATH"

# The documentation site (mkdocs.yml, docs/) into site/, warnings as errors: a renamed function
# or a broken link fails the build. The op reference is generated from the op declarations.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: $(STAMP)
	$(VENV)/bin/mkdocs serve

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(STAMP) lint
	$(PY) -m pytest -n 2 tests

# Not in CI: the property tests alone, with fresh random examples (EXPLORE times as many as
# make test's fixed ones) drawn from a seed it prints; SEED=N replays a run.
EXPLORE ?= 10
test-explore: $(STAMP)
	@seed=$${SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; \
	echo "test-explore: hypothesis seed $$seed, $(EXPLORE)x examples"; \
	MINIPALLAS_EXPLORE=$(EXPLORE) $(PY) -m pytest -n 2 -p no:cacheprovider \
		--hypothesis-seed=$$seed tests \
	|| { echo "test-explore FAILED: replay with make test-explore SEED=$$seed EXPLORE=$(EXPLORE)"; exit 1; }

fuzz: $(STAMP)
	$(PY) -m minipallas.tools.fuzz.programs $(FUZZ_ARGS)

fuzz-upstream: $(STAMP)
	$(PY) -m minipallas.tools.fuzz.upstream $(FUZZ_ARGS)

fuzz-kernels: $(STAMP)
	$(PY) -m minipallas.tools.fuzz.kernels $(FUZZ_ARGS)

# The bench scripts are modules of the bench package, run from here (bench/__init__.py).
bench: $(STAMP)
	$(PY) -m bench.benchmarks.ir_bench
	$(PY) -m bench.benchmarks.discharge_bench
	$(PY) -m bench.benchmarks.vs_upstream
	$(PY) -m bench.benchmarks.kernels_bench

# Kernels that span devices, on 8 CPU devices of this process: upstream's TPU interpret mode,
# minipallas's simulator and its XLA collectives, timed in one run (issue 47).
bench-devices: $(STAMP)
	$(PY) -m bench.benchmarks.devices_bench $(BENCH_ARGS)

# On a TPU machine (jax, libtpu, numpy there; minipallas from a wheel on PYTHONPATH, see the
# docs/guides/tpu.md, "Running kernels on a TPU"): no .venv, the machine's python.
tpu-check:
	$(PYTHON) -m bench.chip.tpu_check $(TPU_ARGS)

# Issue 46's parameter corpus (minipallas/tools/corpora/param_cases.py): upstream's lowering against
# minipallas's module, bit for bit and against float64 (writes tpu-params.json)
tpu-params:
	$(PYTHON) -m bench.chip.tpu_params $(TPU_ARGS)

# PASSES='my-pass{...}' (with TPU_ARGS='--load my_pass.py' for a pass of one's own): a pipeline run
# on each kernel first, timed against upstream and against the pipeline without it
tpu-bench:
	$(PYTHON) -m bench.benchmarks.tpu_bench $(if $(PASSES),--passes '$(PASSES)') $(TPU_ARGS)

# The kernel fuzzer on the chip (run from outside the checkout: its minipallas/ folder would
# shadow the installed package); FUZZ_ARGS=--aot compiles both sides only, on any machine.
tpu-difftest:
	cd /tmp && $(PYTHON) -m minipallas.tools.difftest.cli $(CURDIR)/tests/difftest/chip_cases.py --device tpu $(TPU_ARGS)

fuzz-tpu:
	cd /tmp && $(PYTHON) -m minipallas.tools.fuzz.tpu $(FUZZ_ARGS)

mutate: $(STAMP)
	$(PY) -m bench.mutation.mutate $(MUTATE_ARGS)

clean:
	rm -rf $(VENV) .venv-lock .venv-latest build site *.egg-info

# Every target installs what it needs into .venv on first use; a changed pyproject.toml reinstalls.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
# The demo needs only the runtime and the emulator, not the CDK and the linters: a lighter first run.
DEMO_STAMP := $(VENV)/.installed-local
# MkDocs for the site (mkdocs.yml). Material prints a notice about its own end of life on every build: nothing to
# act on here.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

.PHONY: demo test lint typecheck bench clean synth openapi lambda-venv docs chromium

# A machine may set PYTHONDONTWRITEBYTECODE (this project's development machines do). Then no module is ever
# cached and every process compiles what it imports from source again (torch's DDP alone loads sympy: about 6 s of
# compiling per rank, at every start). The project's virtualenv and tree keep their bytecode (__pycache__ is
# ignored by git; the Lambda package ships none).
unexport PYTHONDONTWRITEBYTECODE

# $(call install,EXTRA): create the venv if needed, install the project with that extra, stamp the target.
# --no-compile: pip would byte-compile every module of every package (torch, transformers, the CDK...), most of
# which nothing here imports; Python compiles a module to __pycache__ at its first import instead, once.
# PYTHONWARNINGS: setuptools warns, on every editable install, that a folder named like the package may shadow it
# (this tree's spotrun/ is that package); nothing to act on, so a first run does not print it.
define install
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	PYTHONWARNINGS=ignore::UserWarning $(BIN)/python -m pip install --quiet --no-compile -e '.[$(1)]'
	touch $@
endef

$(STAMP): pyproject.toml
	$(call install,dev)

$(DEMO_STAMP): pyproject.toml
	$(call install,local)

## demo: run one training job through the whole control plane in the embedded AWS emulator
demo: $(DEMO_STAMP)
	$(BIN)/spotrun demo

## test: lint, type-check, then every test suite
# Unit, infra and integration tests run on two workers, a file per worker. The end-to-end and chaos suites run after
# them on four (--dist loadfile: a module's emulator and fixtures stay in one process): their jobs mostly wait on
# scaled time (boots, heartbeats, step sleeps), so four files at once share the cores, the slowest started first
# (tests/conftest.py; docs/development/testing.md has the figures). The PyTorch example runs alone last: four
# torchrun ranks fill both cores, and a rank's save must fit in the scaled two-minute notice.
# The linters and mypy run side by side (make -j2), each one's output printed whole when it ends; either failing
# fails the target before any test runs.
test: $(STAMP)
	$(MAKE) --no-print-directory -j2 --output-sync=target lint typecheck
	$(MAKE) --no-print-directory lambda-venv chromium
	$(BIN)/python -m pytest -q -n 2 --dist loadfile tests/unit tests/infra tests/integration
	$(BIN)/python -m pytest -q -n 4 --dist loadfile --no-loadscope-reorder tests/e2e tests/chaos \
		--ignore tests/e2e/test_pytorch.py --ignore tests/e2e/test_multinode.py
	$(BIN)/python -m pytest -q -n 2 --dist load tests/e2e/test_pytorch.py tests/e2e/test_multinode.py

## lambda-venv: the functions' runtime Python with only the Powertools layer's packages and the runtime's SDK
# (infra/lambda_env.py), built once under .cache/lambda-venv/ (PyPI, under a minute) for the bundle's import tests
# and the cold-start bench; a machine without that Python fails here, naming it.
lambda-venv: $(STAMP)
	$(BIN)/python -m infra.lambda_env

## chromium: Debian's Chromium, which the dashboard's browser tests drive headless (tests/e2e/test_dashboard.py);
# installed once, as root, from Debian's packages (no browser is ever downloaded by the tests). apt's output goes to
# .cache/chromium-install.log, printed only when the install fails.
chromium:
	@test -x /usr/bin/chromium || { mkdir -p .cache && { DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
		>.cache/chromium-install.log 2>&1 || { cat .cache/chromium-install.log; exit 1; }; }

## lint: ruff, the layer contracts (lint-imports) and the documentation site built strictly (a broken link fails)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(MKDOCS) build --strict

## docs: build the documentation site into site/ (open site/index.html); `.venv/bin/mkdocs serve` serves it live
docs: $(STAMP)
	$(MKDOCS) build --strict

## typecheck: mypy over the code, the bench and the docs generators
typecheck: $(STAMP)
	$(BIN)/mypy spotrun functions infra bench tools/docs

## synth: write the CloudFormation template of the CDK app to cdk.out (offline; no AWS account, no Docker)
synth: $(STAMP)
	CDK_HOME=$(CURDIR)/.cache/cdk $(BIN)/python -m infra.app

## openapi: regenerate openapi.json (the REST API's OpenAPI document) from the API function
openapi: $(STAMP)
	$(BIN)/python -m functions.api.openapi

## bench: the benchmarks (docs/development/bench.md); e.g. make bench BENCH_ARGS='--only recovery --runs 3'
bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache cdk.out .spotrun site test-output

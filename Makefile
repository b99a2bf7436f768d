# Two commands matter to a new user: `make run` and `make test`. Everything else is for developers.
PYTHON  ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
UV_VERSION := 0.13.9

.PHONY: install browser run stop test test-fast test-nightly lint lock bench bench-full bench-plone bench-storage loadtest loadtest-search clean

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# The storage's transcoder is compiled in place (hatch_build.py): a change of its sources rebuilds.
TRANSCODER := hatch_build.py $(wildcard plone_connector/storage/jsonstate*.py plone_connector/storage/jsonstate*.pxd plone_connector/storage/jsonstate*.pyx)

$(STAMP): $(BIN)/uv requirements.txt pyproject.toml $(TRANSCODER)
	$(BIN)/uv pip sync --quiet --python $(BIN)/python requirements.txt
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps --no-build-isolation \
		--reinstall-package plone-catalog-service -e .
	touch $(STAMP)

install: $(STAMP)

## Start the service on http://127.0.0.1:8080 (embedded PostgreSQL + demo catalog unless DATABASE_URL is set).
## Ctrl-C (or SIGTERM) stops the service and the embedded PostgreSQL with it.
run: $(STAMP)
	$(BIN)/catalog-service serve --demo

## Stop embedded PostgreSQL servers left running under .pgdata (a killed `make run`, the tests' server).
stop:
	@if [ -x $(BIN)/catalog-service ]; then $(BIN)/catalog-service embedded stop $(wildcard .pgdata/*); \
	else echo "no $(BIN): nothing to stop with (make install)"; fi

## Install everything and run the whole suite (what CI runs). The suite runs on the embedded
## PostgreSQL 18 (or DATABASE_URL); the service's API, store and differential tests and the
## storage's behaviour, conformance, blob, pack, fault, history and lifecycle tests run again on
## the machine's PostgreSQL 15 when one answers on 127.0.0.1:5432 (PG15_URL), since both are
## supported.
PG15_URL ?= postgresql://127.0.0.1:5432/test
PG15_TESTS := tests/service/test_api.py tests/service/test_store.py tests/service/test_relevance.py \
	tests/service/test_differential.py tests/service/test_differential_edges.py \
	tests/storage/test_behaviour.py tests/storage/test_conformance_hf.py tests/storage/test_conformance_hp.py \
	tests/storage/test_blobs.py tests/storage/test_pack.py tests/storage/test_faults.py \
	tests/storage/test_history.py tests/storage/test_lifecycle.py
## Debian's chromium for the browser test (tests/service/test_browser.py), when it is missing and
## apt-get can install it (as root); otherwise that test skips and says why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "== chromium not installed: the browser test will skip"; }

test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -p no:cacheprovider $(PYTEST_ARGS)
	@if $(BIN)/python -c "import psycopg,sys; psycopg.connect('$(PG15_URL)', connect_timeout=3).close()" 2>/dev/null; then \
		echo "== service and storage tests again on $(PG15_URL)"; \
		DATABASE_URL=$(PG15_URL) $(BIN)/python -m pytest -p no:cacheprovider -q $(PG15_TESTS); \
	else echo "== no PostgreSQL at $(PG15_URL): second run skipped"; fi

## Everything except the slow Plone layers and the long hypothesis profile.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

## Many more generated cases for the differential tests.
test-nightly: $(STAMP)
	HYPOTHESIS_PROFILE=nightly $(BIN)/python -m pytest tests/service $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

## Re-pin requirements.txt (and the service image's subset) from pyproject.toml.
lock: $(BIN)/uv
	$(BIN)/uv pip compile --quiet --python-version 3.11 --extra dev --no-emit-package plone-catalog-service pyproject.toml -o requirements.txt
	$(BIN)/uv pip compile --quiet --python-version 3.11 --extra service --no-emit-package plone-catalog-service pyproject.toml -o requirements-service.txt

bench: $(STAMP)
	$(BIN)/python benchmarks/catalog_bench.py --sizes 10000,100000

bench-full: $(STAMP)
	$(BIN)/python benchmarks/catalog_bench.py --sizes 10000,100000,1000000

## Plone with ZCatalog vs the connector, on FileStorage, RelStorage and JsonbStorage (docs/benchmarks/plone.md).
bench-plone: $(STAMP)
	$(BIN)/python benchmarks/plone_bench.py

## The ZODB storage against RelStorage and FileStorage: objects/s, then client instructions per
## object under valgrind (docs/benchmarks/storage.md, storage_instructions.md).
bench-storage: $(STAMP)
	$(BIN)/python benchmarks/storage_bench.py --objects 1000 --repeat 7 --concurrency 1,4
	$(BIN)/python benchmarks/storage_instructions.py --objects 300

## Deletes the virtualenv and the embedded PostgreSQL's data: refused while a server runs on that data.
## The locust scenarios (headless, LOADTEST_SECONDS) on a 100k-object corpus, and the folder listing's
## requests/s (wrk) beside the floor's: LOADTEST_FLOOR names the floor script (not in this
## repository). Writes docs/benchmarks/loadtest.md, loadtest_*.csv, loadtest.html, loadtest.png.
LOADTEST_SECONDS ?= 60
loadtest: $(STAMP)
	@command -v wrk >/dev/null || { if [ "$$(id -u)" = 0 ]; then apt-get install -y wrk; else sudo apt-get install -y wrk; fi; }
	$(BIN)/python loadtests/run.py --seconds $(LOADTEST_SECONDS) $(if $(LOADTEST_FLOOR),--floor $(LOADTEST_FLOOR))

## A headless frontend's search traffic (site search with facets, and highlights once offered;
## live search, listings, suggestions once offered) on the service, then its @search part on the
## service's @search and on plone.restapi's @search of a stock Plone site (ZCatalog) with the same
## content (made once, kept under .plonedata/), 50 users each for LOADTEST_SECONDS. Options of
## loadtests/search_run.py in LOADTEST_SEARCH_ARGS (e.g. "--objects 20000 --rounds 3").
## Writes docs/benchmarks/loadtest_search.md, .png and .json.
LOADTEST_SEARCH_ARGS ?=
loadtest-search: $(STAMP)
	$(BIN)/python loadtests/search_run.py --seconds $(LOADTEST_SECONDS) $(LOADTEST_SEARCH_ARGS)

## Deletes the virtualenv, the embedded PostgreSQL's data and the kept Plone sites of loadtest-search: refused while a server runs on that data.
clean:
	@for pid_file in .pgdata/*/postmaster.pid; do \
		[ -f "$$pid_file" ] || continue; \
		pid=$$(head -n 1 "$$pid_file"); \
		if [ -n "$$pid" ] && kill -0 "$$pid" 2>/dev/null; then \
			echo "make clean: PostgreSQL (pid $$pid) is running on $$(dirname $$pid_file); stop it first: make stop" >&2; \
			exit 1; \
		fi; \
	done
	rm -rf $(VENV) .pgdata .plonedata .pytest_cache build
	rm -f plone_connector/storage/*.so plone_connector/storage/compiled_sources.json

# Criogen — run `make help` for the targets.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PG_URL ?= postgres://postgres@127.0.0.1:5432/test
TEST_WORKERS ?= 2
export PYTHONDONTWRITEBYTECODE := 1

.DEFAULT_GOAL := help

help: ## Show this help
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	rm -f $(VENV)/.installed-* && touch $(STAMP)

TS_SDK := tests/api/ts/node_modules/.installed

$(TS_SDK): tests/api/ts/package-lock.json
	cd tests/api/ts && npm ci --no-audit --no-fund --loglevel=error
	touch $(TS_SDK)

A11Y := tests/dashboard/a11y/node_modules/.installed

$(A11Y): tests/dashboard/a11y/package-lock.json
	cd tests/dashboard/a11y && npm ci --no-audit --no-fund --loglevel=error
	touch $(A11Y)

install: $(STAMP) ## Create .venv and install Criogen with its dev tools

install-ts: $(TS_SDK) ## Install the TypeScript SDK the smoke test drives (npm)

install-a11y: $(A11Y) ## Install axe-core, which the dashboard's accessibility test runs in Chromium (npm)

migrate: install ## Apply database migrations (DATABASE_URL, default: ./db.sqlite3)
	$(BIN)/python manage.py migrate --noinput

demo: install ## Start the dashboard with demo data on http://127.0.0.1:8000
	$(BIN)/python manage.py criogen_demo --serve --addrport 127.0.0.1:8000

check: install ## Lint, types, Django checks, migrations up to date, import boundaries
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python manage.py check --fail-level WARNING
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/lint-imports

lint: install ## ruff (lint + format check)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install ## mypy over criogen/engine (strict) and criogen/storage ([tool.mypy])
	$(BIN)/mypy

lint-imports: install ## The engine imports no Django (import-linter)
	$(BIN)/lint-imports

fmt: install ## Format the code
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: install install-ts install-a11y check ## Run the whole test suite (SQLite, PostgreSQL, memory)
	$(BIN)/pytest -q -p no:randomly tests/test_boundaries.py
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadscope --durations=30

reliability: install ## Run the full reliability suite (crashes, races, bad input) and print its figures
	CRIOGEN_RELIABILITY_FULL=1 $(BIN)/pytest -p no:randomly tests/reliability
	CRIOGEN_RELIABILITY_FULL=1 $(BIN)/pytest -p no:randomly -m reliability tests --ignore=tests/reliability

bench: install ## Run the benchmarks and print their figures
	mkdir -p bench/results
	set -o pipefail; $(BIN)/python bench/engine.py | tee bench/results/engine.json
	set -o pipefail; $(BIN)/python bench/langgraph_compare.py --table | tee bench/results/langgraph_compare.json
	set -o pipefail; $(BIN)/python bench/langgraph_savers.py --table | tee bench/results/langgraph_savers.json
	set -o pipefail; $(BIN)/python bench/runner.py | tee bench/results/runner.json
	set -o pipefail; $(BIN)/python bench/celery_capacity.py --table | tee bench/results/celery_capacity.json
	set -o pipefail; $(BIN)/python bench/api.py | tee bench/results/api.json
	set -o pipefail; $(BIN)/python bench/http_compare.py --table | tee bench/results/http_compare.json
	set -o pipefail; $(BIN)/python bench/dashboard.py | tee bench/results/dashboard.json
	set -o pipefail; $(BIN)/python bench/scale.py --table | tee bench/results/scale.json
	set -o pipefail; $(BIN)/python bench/memory.py --table | tee bench/results/memory.json
	$(BIN)/python bench/summary.py

bench-scale: install ## Only the scale benchmark (seeds 1,000,000 threads: ~6 min on a quiet machine, 15 loaded)
	mkdir -p bench/results
	set -o pipefail; $(BIN)/python bench/scale.py --table | tee bench/results/scale.json

screenshots: install ## Regenerate the dashboard screenshots in docs/img/
	$(BIN)/python -m tests.dashboard.screenshots

openapi-snapshot: install ## Regenerate openapi.json from the REST API (commit it)
	$(BIN)/python manage.py openapi_snapshot openapi.json

.PHONY: help install install-ts install-a11y migrate demo check lint typecheck lint-imports fmt test reliability bench bench-scale \
	screenshots openapi-snapshot

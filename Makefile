# Two commands on a fresh machine: `make run` and `make test`. Everything else is optional.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export RMI_HOME ?= $(CURDIR)/.rmi
# torch's waiting threads sleep instead of spinning, so shared cores stay usable
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: run test ui serve bench lint clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

run: $(STAMP)  ## the whole loop on embedded defaults, from an empty RMI_HOME
	$(BIN)/rmi run --fresh

test: $(STAMP)  ## the test suite (about 5 minutes on 2 cores)
	@# the browser test drives Debian's Chromium (never a downloaded browser); installed when we may
	command -v chromium >/dev/null || [ "$$(id -u)" != 0 ] || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)
	@# the production-profile test starts Debian's PostgreSQL server on 127.0.0.1
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null)
	$(BIN)/python -m pytest -q tests

ui: $(STAMP)  ## the Dagster web UI on http://127.0.0.1:3000 over RMI_HOME
	$(BIN)/rmi ui

serve: $(STAMP)  ## the champion over HTTP on http://127.0.0.1:8000 (chat page at /, feedback API), over RMI_HOME
	$(BIN)/rmi serve

bench: $(STAMP)  ## seconds per stage of one cycle, and the share spent on orchestration
	$(BIN)/python bench/cycle_breakdown.py

lint: $(STAMP)
	$(BIN)/ruff check rmi_pipeline tests bench
	$(BIN)/lint-imports

clean:  ## remove the venv and everything the loop wrote
	rm -rf $(VENV) $(RMI_HOME) .pytest_cache .ruff_cache *.egg-info

# Two commands on a fresh machine: `make run` and `make test`. Everything else is optional.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
HF_STAMP := $(VENV)/.installed-hf
export RMI_HOME ?= $(CURDIR)/.rmi
# Python writes the bytecode of what it imports (the install compiles none ahead, below): a shell that sets
# PYTHONDONTWRITEBYTECODE makes every process compile dagster, torch, lightning and mlflow from source again, 18-21 s
# a process here against 7.5-7.9 s from bytecode, and the tests and the loop start many processes
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run run-hf run-task test ui serve bench lint lock clean docs docs-serve

# what running needs (make run, ui, serve: the gateway's extra; make run-hf: the Hugging Face one too); every extra,
# the tests' tools and the production profile come with make test, in one install (a second pass over the installed
# packages costs 15 s)
# no bytecode compiled ahead (as uv does): Python writes it for the modules it imports, about 1 in 4 (saves about
# 450 MB and a minute of install)
# a comma inside $(call ...) would split its argument in two
comma := ,

define install
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	@echo "installing rmi-pipeline and its pinned dependencies into $(VENV) (a few minutes the first time)"
	$(BIN)/python -m pip install --progress-bar on --no-compile -c constraints.txt -e "$(1)"
endef

$(STAMP): pyproject.toml constraints.txt
	$(call install,.[serve])
	touch $(STAMP)

$(HF_STAMP): pyproject.toml constraints.txt
	$(call install,.[serve$(comma)hf])
	touch $(STAMP) $(HF_STAMP)

$(DEV_STAMP): pyproject.toml constraints.txt
	$(call install,.[dev])
	touch $(STAMP) $(HF_STAMP) $(DEV_STAMP)

run: $(STAMP)  ## the whole loop on embedded defaults, from an empty RMI_HOME
	$(BIN)/rmi run --fresh

# the text recipe: word-list tasks on a small Hugging Face Llama built here (docs/how-to/your-model.md)
# (the champion's own sources off: its figures in docs/log.md were measured without them; hints did not help it)
HF_ENV := RMI_RECIPE=rmi_pipeline.recipes.words:WordsRecipe RMI_MODEL_NAME=rmi-words RMI_HOME=$(CURDIR)/.rmi-words \
	RMI_TRAIN_BOOTSTRAP_STEPS=1200 RMI_TRAIN_STEPS=600 \
	RMI_MIX='{"practice": 0, "rl": 0, "hint_distill": 0, "self_label": 0}'

run-hf: $(HF_STAMP)  ## the whole loop on the text recipe, 3 cycles, in .rmi-words
	$(HF_ENV) $(BIN)/rmi run --fresh --cycles 3

# a task the pipeline cannot check: the world writes a team's model and its curators' eval file, users rate a few
# answers, a judge model over HTTP scores the evals (docs/how-to/your-task-and-eval.md)
TASK_ENV := RMI_HOME=$(CURDIR)/.rmi-task RMI_TRAIN_STEPS=300 RMI_SIM_QUERIES_PER_CYCLE=40000

run-task: $(HF_STAMP)  ## the whole loop on a task it cannot check (a team's model, eval file and judge), 3 cycles
	$(TASK_ENV) $(BIN)/rmi run --fresh --cycles 3 --task catalogue

test: $(DEV_STAMP)  ## the test suite (about 20 minutes on 2 cores, install included)
	@# the browser test drives Debian's Chromium (never a downloaded browser); installed when we may
	command -v chromium >/dev/null || [ "$$(id -u)" != 0 ] || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)
	@# the production-profile test starts Debian's PostgreSQL server on 127.0.0.1
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null)
	@# three workers on two cores: with two, a quarter of the cores sat idle while a worker waited on a server or
	@# a daemon (1271 s against 1005 s, 2026-12-07); each file runs on one worker,
	@# the files on the one real loop run all on the same one (tests/conftest.py)
	$(BIN)/python -m pytest -q -n 3 tests

ui: $(STAMP)  ## the Dagster web UI on http://127.0.0.1:3000 over RMI_HOME
	$(BIN)/rmi ui

serve: $(STAMP)  ## the champion over HTTP on http://127.0.0.1:8000 (chat page at /, feedback API), over RMI_HOME
	$(BIN)/rmi serve

bench: $(STAMP)  ## seconds per stage of one cycle, and the share spent on orchestration
	$(BIN)/python bench/cycle_breakdown.py

docs: $(DEV_STAMP)  ## the docs site in site/: the reference pages written from the code, then a strict build
	$(BIN)/python docs/generate.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(DEV_STAMP)  ## the docs site on http://127.0.0.1:8001, rebuilt on every edit
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8001

lint: $(DEV_STAMP)
	$(BIN)/ruff check rmi_pipeline tests bench
	$(BIN)/lint-imports

# uv keeps the versions constraints.txt already pins (UPGRADE=--upgrade moves every one to the newest allowed)
lock: $(DEV_STAMP)  ## resolve constraints.txt again from pyproject.toml, after a dependency changed there
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra prod --python-version 3.11 $(UPGRADE) \
		$(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS)) --custom-compile-command "make lock" -o constraints.txt

clean:  ## remove the venv and everything the loop wrote
	rm -rf $(VENV) $(RMI_HOME) .rmi-words .rmi-task .pytest_cache .ruff_cache *.egg-info

# The README's commands: `make run` and `make test`. Both create .venv when missing and
# install everything the project needs into it first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test install system-deps lint typecheck vectors bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# PostgreSQL server binaries for the throwaway test cluster. Installed with apt-get when
# missing (CI runs as root on Debian); elsewhere the PostgreSQL tests say what is missing.
system-deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing PostgreSQL server binaries (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else echo "PostgreSQL server binaries not found; set HANDOFF_TRACE_NO_PG=1 to skip them"; fi; \
	fi

# Until the dashboard exists, the main job verifies the bundled example captures.
# Exit status 1 only means some example elements were rejected, which they are meant to be.
run: install
	$(BIN)/handoff-trace verify --trust examples/trust.json --at 1793000030 \
	    examples/capture.jsonl examples/broken.jsonl; test $$? -le 1

lint: install
	$(BIN)/ruff check app tests bench
	$(BIN)/ruff format --check app tests bench

typecheck: install
	$(BIN)/mypy

test: system-deps lint typecheck
	$(BIN)/python tests/vectors/generate.py --check
	$(BIN)/pytest -q

vectors: install
	$(BIN)/python tests/vectors/generate.py

bench: install
	$(BIN)/python bench/verify_rate.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

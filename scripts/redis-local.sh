#!/usr/bin/env bash
# Start or stop a throwaway Redis owned by this checkout (no persistence).
#   scripts/redis-local.sh start PORT DIR    -> prints the URL once it answers PING
#   scripts/redis-local.sh stop DIR
set -euo pipefail
cmd=${1:?usage: redis-local.sh start PORT DIR | stop DIR}
case "$cmd" in
  start)
    port=${2:?port}; dir=${3:?dir}
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)  # redis-server changes into --dir before opening its files
    if [ -f "$dir/redis.pid" ] && kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null; then
      echo "redis://127.0.0.1:$port/0"; exit 0
    fi
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
      --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
    for _ in $(seq 1 100); do
      if redis-cli -p "$port" ping >/dev/null 2>&1; then echo "redis://127.0.0.1:$port/0"; exit 0; fi
      sleep 0.1
    done
    echo "redis-server did not answer on port $port; see $dir/redis.log" >&2; exit 1 ;;
  stop)
    dir=${2:?dir}
    if [ -f "$dir/redis.pid" ]; then
      pid=$(cat "$dir/redis.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      rm -f "$dir/redis.pid"
    fi ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Make sure redis-server is installed (Debian's package), installing it if needed.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "redis-server is missing and apt-get is not available: install Redis 7 yourself" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing redis-server from Debian's packages..." >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
command -v redis-server >/dev/null

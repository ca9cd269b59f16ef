#!/usr/bin/env bash
# Make sure stunnel4 is installed (Debian's package), installing it if needed: the TLS tests put
# it in front of the local broker (tests/kafka_tls.py, docs/testing.md).
set -euo pipefail
if command -v stunnel4 >/dev/null 2>&1 || command -v stunnel >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "stunnel4 is missing and apt-get is not available: install stunnel (5.x) yourself" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing stunnel4 from Debian's packages..." >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq stunnel4 >/dev/null
command -v stunnel4 >/dev/null || command -v stunnel >/dev/null

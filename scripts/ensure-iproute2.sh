#!/usr/bin/env bash
# Make sure `ip` is installed (Debian's iproute2), installing it if needed: the tests of a run over
# several hosts make the hosts as network namespaces with it (tests/cluster, docs/testing.md).
set -euo pipefail
if command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ip (iproute2) is missing and apt-get is not available: install iproute2 yourself" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing iproute2 from Debian's packages..." >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq iproute2 >/dev/null
command -v ip >/dev/null || [ -x /usr/sbin/ip ]

#!/usr/bin/env bash
# Make sure nginx is installed (Debian's package), installing it if needed: the HTTP cache tests and
# the capacity benchmark put it in front of `rankflow serve` as a caching reverse proxy
# (rankflow.services.LocalNginx, docs/http.md). Only its binary is used: each test runs its own
# nginx as the current user, with its own configuration, on a free port.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "nginx is missing and apt-get is not available: install nginx (1.18 or later) yourself" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing nginx from Debian's packages..." >&2
$SUDO apt-get update -qq
# no service started at install (a machine may have port 80 taken): the tests start their own
echo exit 101 | $SUDO tee /usr/sbin/policy-rc.d.rankflow >/dev/null
if [ ! -e /usr/sbin/policy-rc.d ]; then
  $SUDO install -m 755 /usr/sbin/policy-rc.d.rankflow /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO rm -f /usr/sbin/policy-rc.d.rankflow
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nginx >/dev/null
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]

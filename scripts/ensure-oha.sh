#!/usr/bin/env bash
# Make sure the HTTP load generator oha (a Rust program from crates.io) is installed, building it
# with cargo if needed: the capacity benchmark (make bench-capacity, scripts/bench_capacity.py)
# offers up to tens of thousands of requests/s open-loop, which no Python load generator does on
# two cores. Only the benchmark needs it: neither make setup nor CI call this. The build takes a
# few minutes once; the binary goes to cargo's bin folder (~/.cargo/bin).
set -euo pipefail
VERSION=1.16.0
OHA="${CARGO_HOME:-$HOME/.cargo}/bin/oha"
if [ -x "$OHA" ] && "$OHA" --version 2>/dev/null | grep -q " $VERSION\$"; then
  exit 0
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "oha $VERSION is missing and cargo is not available: install Rust's cargo (rustup), or oha $VERSION yourself" >&2
  exit 1
fi
echo "building oha $VERSION with cargo (a few minutes, once)..." >&2
cargo install oha --version "$VERSION" --locked --quiet
"$OHA" --version >/dev/null

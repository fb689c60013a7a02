#!/usr/bin/env bash
# Set up (if needed) and run `leaky demo` on the built-in examples.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec "$LEAKY_PY" -m leaky demo "$@"

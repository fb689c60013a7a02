#!/usr/bin/env bash
# Set up (if needed) and run `leaky demo` on the built-in examples.
set -euo pipefail
LEAKY_EXTRAS="${LEAKY_EXTRAS:-0}"   # the demo needs no integrations
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec "$LEAKY_PY" -m leaky demo "$@"

#!/usr/bin/env bash
# Set up (if needed) and run the test suite. Exits non-zero when a test fails.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec "$LEAKY_PY" -m pytest -q "$@"

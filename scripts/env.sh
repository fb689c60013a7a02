#!/usr/bin/env bash
# Create .venv (if missing) with torch==2.13.0 (CPU) and leaky installed editable.
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LEAKY_VENV:-$root/.venv}"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  echo "leaky: creating $venv" >&2
  "$py" -m venv "$venv"
fi
# Never let pip resolve an unpinned torch: that can pull a multi-GB CUDA build.
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  echo "leaky: installing torch==2.13.0" >&2
  "$venv/bin/python" -m pip install -q torch==2.13.0
fi
if ! "$venv/bin/python" -c "import leaky, rich, numpy, pytest, hypothesis" 2>/dev/null; then
  echo "leaky: installing leaky and its test tools" >&2
  "$venv/bin/python" -m pip install -q -e "$root[test]"
fi
# The integrations' tests run real Lightning / Hugging Face / TensorBoard; torch stays pinned.
if [ "${LEAKY_EXTRAS:-1}" = "1" ] && ! "$venv/bin/python" -c "import lightning, transformers, accelerate, tensorboard" 2>/dev/null; then
  echo "leaky: installing the integrations' extras (lightning, transformers, tensorboard)" >&2
  "$venv/bin/python" -m pip install -q "torch==$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')" -e "$root[integrations]"
fi
export LEAKY_PY="$venv/bin/python"

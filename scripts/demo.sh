#!/usr/bin/env bash
# The main job: analyse a vLLM plugin checkout (default: the bundled example).
#   scripts/demo.sh                      # examples/mini-metax
#   scripts/demo.sh /path/to/vLLM-metax  # a real checkout
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ROOT=${1:-examples/mini-metax}
ROOT=$(cd "$ROOT" && pwd)
echo "== attnlens profile --root $ROOT"
.venv/bin/attnlens profile --root "$ROOT" --python .venv/bin/python
echo
echo "== attnlens backends --root $ROOT"
.venv/bin/attnlens backends --root "$ROOT" --python .venv/bin/python --custom-ops --timing
if [ -f "$ROOT/mini_metax/attention/backends/flash_attn.py" ]; then
  F="$ROOT/mini_metax/attention/backends/flash_attn.py"
  L=$(grep -n "reshape_and_cache_flash(key" "$F" | head -1 | cut -d: -f1)
  C=$(awk -v l="$L" 'NR==l{print index($0,"reshape_and_cache_flash(")}' "$F")
  echo "== attnlens trace $F:$L:$C"
  .venv/bin/attnlens trace --root "$ROOT" --python .venv/bin/python --timing "$F:$L:$C"
fi
if .venv/bin/attnlens check --help >/dev/null 2>&1; then
  echo
  echo "== attnlens check --root $ROOT"
  .venv/bin/attnlens check --root "$ROOT" --python .venv/bin/python || true
fi

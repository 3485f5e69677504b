#!/usr/bin/env bash
# Idempotent set-up of the development environment (used by demo.sh and test.sh).
#   .venv/         attnlens (editable) + its dependencies + the real upstream vllm==0.26.0 (--no-deps)
#   .venv-target/  (only with --target) a *target* interpreter with torch (CPU) and triton, for probe tests
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VLLM_VERSION=${ATTNLENS_VLLM_VERSION:-0.26.0}
want_target=0
for a in "$@"; do [ "$a" = "--target" ] && want_target=1; done

pip_retry() { for i in 1 2 3; do "$@" && return 0; echo "pip failed (try $i), retrying" >&2; sleep 5; done; return 1; }

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.attnlens-setup
want="$(sha1sum pyproject.toml | cut -c1-12)-vllm$VLLM_VERSION"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  pip_retry .venv/bin/pip install -q --upgrade pip
  pip_retry .venv/bin/pip install -q -e ".[test]"
  # Ray (attnlens[fleet], ~80 MB wheel) for `probe matrix` and tests/fleet; optional: those tests skip without it
  pip_retry .venv/bin/pip install -q -e ".[fleet]" || echo "warning: ray not installed; the fleet tests will skip" >&2
  pip_retry .venv/bin/pip install -q --no-deps "vllm==$VLLM_VERSION"
  echo "$want" > "$stamp"
fi

if [ "$want_target" = 1 ]; then
  if [ ! -x .venv-target/bin/python ]; then
    "$PY" -m venv .venv-target
  fi
  tstamp=.venv-target/.attnlens-setup
  twant="torch2.13.0-triton-vllm$VLLM_VERSION"
  if [ ! -f "$tstamp" ] || [ "$(cat "$tstamp")" != "$twant" ]; then
    pip_retry .venv-target/bin/pip install -q --upgrade pip
    # torch 2.13.0 CPU (a local wheel on these machines; elsewhere PyPI's), Triton for TRITON_INTERPRET=1
    pip_retry .venv-target/bin/pip install -q "torch==2.13.0" numpy
    pip_retry .venv-target/bin/pip install -q triton || echo "warning: triton not installed; Triton probe tests will skip" >&2
    pip_retry .venv-target/bin/pip install -q --no-deps "vllm==$VLLM_VERSION"
    echo "$twant" > "$tstamp"
  fi
fi

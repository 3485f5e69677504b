#!/usr/bin/env bash
# The whole test suite (what CI runs). Sets everything up on a fresh machine first.
#   scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --target
export ATTNLENS_TEST_TARGET_PYTHON="$PWD/.venv-target/bin/python"
if ! command -v nvim >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq neovim >/dev/null) || echo "warning: neovim not installed; the Neovim e2e test will skip" >&2
fi
rc=0
.venv/bin/python -m pytest -q -p no:cacheprovider "$@" || rc=$?
if [ -x .ci/vscode_e2e.sh ] && [ "${ATTNLENS_SKIP_VSCODE:-0}" != 1 ] && [ $# -eq 0 ]; then
  .ci/vscode_e2e.sh || rc=1
fi
exit $rc

#!/usr/bin/env bash
# The whole test suite (what CI runs). Sets everything up on a fresh machine first.
#   scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --target
export ATTNLENS_TEST_TARGET_PYTHON="$PWD/.venv-target/bin/python"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  # Neovim for the real-editor test; Chromium for the headless HTML check of the probe matrix (the VS Code
  # UI test uses the same Debian package)
  pkgs=""
  command -v nvim >/dev/null 2>&1 || pkgs="$pkgs neovim"
  [ -x /usr/bin/chromium ] || pkgs="$pkgs chromium"
  if [ -n "$pkgs" ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null) \
      || echo "warning: could not install$pkgs; the tests that need them will skip" >&2
  fi
fi
rc=0
.venv/bin/python -m pytest -q -p no:cacheprovider "$@" || rc=$?
if [ -x .ci/vscode_e2e.sh ] && [ "${ATTNLENS_SKIP_VSCODE:-0}" != 1 ] && [ $# -eq 0 ]; then
  .ci/vscode_e2e.sh || rc=1
fi
exit $rc

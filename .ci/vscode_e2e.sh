#!/usr/bin/env bash
# CI job for the VS Code extension (client-vscode/):
#   1. build from a clean tree: npm ci, tsc --noEmit, esbuild bundle, vsce package -> attnlens.vsix
#   2. tests/e2e_vscode/setup.sh: code-server 4.100.3 + playwright-core + Debian chromium (idempotent;
#      cache $ATTNLENS_E2E_DEPS, default .e2e/deps, and ~/.npm between runs)
#   3. tests/e2e_vscode/ui.test.mjs: the extension in a real VS Code UI against `attnlens serve`
#
# Environment:
#   ATTNLENS_PYTHON           interpreter with attnlens + pygls installed (default .venv/bin/python)
#   ATTNLENS_E2E_DEPS         setup.sh destination (default .e2e/deps)
#   ATTNLENS_E2E_ARTIFACTS    screenshots + logs (default .e2e/artifacts)
#   ATTNLENS_E2E_CLEAN_CLONE=1  build and test a fresh `git clone` of HEAD (committed files only)
# Budget: about 5 minutes on a 2-core machine with empty caches; the UI test itself takes about 4 minutes
# (5 window reloads among its scenarios), so it gets 600 s.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DEPS=$(realpath -m "${ATTNLENS_E2E_DEPS:-$REPO/.e2e/deps}")
ART=$(realpath -m "${ATTNLENS_E2E_ARTIFACTS:-$REPO/.e2e/artifacts}")
PY=${ATTNLENS_PYTHON:-$REPO/.venv/bin/python}
T0=$(date +%s)
step() { echo; echo "=== [$(( $(date +%s) - T0 ))s] $*"; }

SRC=$REPO
if [ "${ATTNLENS_E2E_CLEAN_CLONE:-0}" = 1 ]; then
  SRC=$(mktemp -d "${TMPDIR:-/tmp}/attnlens-clone-XXXXXX")
  trap 'rm -rf "$SRC"' EXIT
  step "git clone $REPO (HEAD) -> $SRC"
  git clone -q --depth 1 "file://$REPO" "$SRC"
fi

step "interpreter check: $PY"
"$PY" -c "import attnlens, pygls; print('attnlens', attnlens.__version__, '| pygls', pygls.__version__ if hasattr(pygls, '__version__') else '')"

step "build client-vscode (npm ci, tsc --noEmit, esbuild, vsce package)"
cd "$SRC/client-vscode"
rm -rf dist attnlens.vsix
npm ci --no-audit --no-fund --loglevel=error
npx tsc -p . --noEmit
npm run -s bundle
npx vsce package --no-dependencies --no-rewrite-relative-links -o attnlens.vsix
ls -l attnlens.vsix
npx --no-install vsce ls --no-dependencies 2>/dev/null | sed 's/^/  vsix: /' || true

step "setup code-server + playwright-core + chromium into $DEPS"
"$SRC/tests/e2e_vscode/setup.sh" "$DEPS"

step "UI test (artifacts: $ART)"
rm -rf "$ART"
mkdir -p "$ART"
set +e
ATTNLENS_VSIX="$SRC/client-vscode/attnlens.vsix" ATTNLENS_E2E_DEPS="$DEPS" ATTNLENS_E2E_ARTIFACTS="$ART" \
  ATTNLENS_PYTHON="$PY" timeout -k 15 600 node "$SRC/tests/e2e_vscode/ui.test.mjs"
rc=$?
set -e
step "done: exit $rc (total $(( $(date +%s) - T0 )) s)"
exit $rc

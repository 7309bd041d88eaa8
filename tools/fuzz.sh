#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs every libFuzzer target for a while (outside CI): builds build-fuzz with clang, ASan and
# UBSan, fuzzes each target from a scratch copy of its corpus, and copies any crasher into the
# target's corpus so that `meson test --suite fuzz-regress` replays it from then on.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET (default 600)] [TARGET...]
#
# Prints one line per target (runs, new corpus entries, crashes) and exits 1 if any crashed.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
shift || true
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    >build-fuzz.setup.log 2>&1 || { cat build-fuzz.setup.log; exit 1; }
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n "s/^  '\([a-z0-9-]*\)': \[.*/\1/p" tests/fuzz/meson.build)
  targets+=(compute scheduler api-stream)  # declared on their own (a daemon's handlers, a model)
fi
ninja -C build-fuzz "${targets[@]/#/tests/fuzz/fuzz-}" >/dev/null || exit 1
failed=0
for t in "${targets[@]}"; do
  exe=build-fuzz/tests/fuzz/fuzz-$t
  [ -x "$exe" ] || { echo "$t: no binary"; failed=1; continue; }
  work=$(mktemp -d)
  cp tests/fuzz/$t.corpus/* "$work/" 2>/dev/null
  dict=(); [ -f tests/fuzz/$t.dict ] && dict=(-dict=tests/fuzz/$t.dict)
  log=$work.log
  nice "$exe" -max_total_time="$secs" -max_len=65536 -timeout=20 -rss_limit_mb=4096 \
    -artifact_prefix="$work/" "${dict[@]}" "$work" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  [ -z "$runs" ] && runs=$(grep -oE '#[0-9]+' "$log" | tail -1 | tr -d '#')
  crashes=0
  for c in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [ -e "$c" ] || continue
    cp "$c" tests/fuzz/$t.corpus/
    crashes=$((crashes + 1))
  done
  new=$(( $(ls "$work" | wc -l) - $(ls tests/fuzz/$t.corpus | wc -l) ))
  echo "$t: ${runs:-?} runs in ${secs} s, ${new#-} new corpus entries (not kept), $crashes crashes (rc $rc)"
  [ $crashes -gt 0 ] || [ $rc -ne 0 ] && failed=1
  rm -rf "$work" "$log"
done
exit $failed

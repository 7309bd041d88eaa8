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
  art=$work.art     # apart from the corpus copy: a seed named crash-* is not a crash
  mkdir -p "$art"
  nice "$exe" -max_total_time="$secs" -max_len=65536 -timeout=20 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$art/" "${dict[@]}" "$work" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  [ -z "$runs" ] && runs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')   # not a stack frame's #N
  crashes=0 starved=0
  for c in "$art"/crash-* "$art"/leak-* "$art"/timeout-* "$art"/oom-*; do
    [ -e "$c" ] || continue
    # libFuzzer's timeout is wall time: a nice'd run starved by other work times out on
    # inputs that are fast. Such an input is run again alone; only a slow one counts.
    if [[ "$(basename "$c")" == timeout-* ]]; then
      t0=$(date +%s.%N)
      "$exe" -timeout=20 "$c" >/dev/null 2>&1
      again=$?
      secs_alone=$(awk "BEGIN { printf \"%.3f\", $(date +%s.%N) - $t0 }")
      if [ $again -eq 0 ]; then
        echo "$t: $(basename "$c") ran clean alone in ${secs_alone} s: the run was starved, not kept"
        starved=$((starved + 1))
        continue
      fi
    fi
    cp "$c" tests/fuzz/$t.corpus/
    crashes=$((crashes + 1))
  done
  new=$(( $(ls "$work" | wc -l) - $(ls tests/fuzz/$t.corpus | wc -l) ))
  echo "$t: ${runs:-?} runs in ${secs} s, ${new#-} new corpus entries (not kept), $crashes crashes (rc $rc)"
  if [ $crashes -gt 0 ] || { [ $rc -ne 0 ] && [ $starved -eq 0 ]; }; then
    failed=1
    mkdir -p build-fuzz/logs
    keep=build-fuzz/logs/$t-$(date -u +%Y%m%dT%H%M%S).log   # the report, to read later
    cp "$log" "$keep" && echo "$t: log kept in $keep"
  fi
  rm -rf "$work" "$art" "$log"
done
exit $failed

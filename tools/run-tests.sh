#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds dsv4 twice (normal, and ASan+UBSan) and runs every test in both.
# Ends with the line `N passed, N failed`; exits non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3

jobs=$(nproc)
fail_build=0

setup() { # dir, extra meson args...
  local dir=$1; shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { cat "$dir.setup.log"; return 1; }
  fi
  ninja -C "$dir" -j "$jobs" || return 1
}

declare -a dirs=()
if setup build; then dirs+=(build); else fail_build=$((fail_build + 1)); fi
if setup build-san -Db_sanitize=address,undefined -Dbuildtype=debug; then
  dirs+=(build-san)
else
  fail_build=$((fail_build + 1))
fi

# ThreadSanitizer: the expert fetcher's rings and slot state machine (its test drives them from
# several threads and kills the daemon mid-load). Only those two targets are built.
if [ ! -f build-tsan/build.ninja ]; then
  meson setup build-tsan -Db_sanitize=thread -Dbuildtype=debug >build-tsan.setup.log 2>&1 ||
    cat build-tsan.setup.log
fi
if ninja -C build-tsan -j "$jobs" tests/test-fetcher daemons/fetcher/dsv4-fetcher; then
  echo "=== meson test -C build-tsan fetcher"
  meson test -C build-tsan --no-rebuild --print-errorlogs fetcher
  tsan_dir=build-tsan
else
  fail_build=$((fail_build + 1))
fi

for d in "${dirs[@]}"; do
  suites=()
  # Python reference checks and slow end-to-end runs are not repeated under sanitizers.
  [ "$d" = build-san ] && suites=(--no-suite py --no-suite slow)
  echo "=== meson test -C $d ${suites[*]}"
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
    meson test -C "$d" --num-processes "$jobs" --print-errorlogs "${suites[@]}"
done

"$py" - "$fail_build" "${dirs[@]}" ${tsan_dir:-} <<'PY'
import json, sys
failed = int(sys.argv[1])
passed = 0
for d in sys.argv[2:]:
    try:
        lines = open(f"{d}/meson-logs/testlog.json").read().splitlines()
    except OSError:
        failed += 1
        continue
    for line in lines:
        r = json.loads(line)["result"]
        if r in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif r != "SKIP":
            failed += 1
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY

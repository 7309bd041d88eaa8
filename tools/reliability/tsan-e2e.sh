#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ThreadSanitizer over the whole daemon set (outside CI: a TSan build of everything and the
# end-to-end scenarios take ~10 minutes on 2 cores). Every process the tests start writes its
# reports to one directory (TSAN_OPTIONS log_path); any report fails the run.
#
#   tools/reliability/tsan-e2e.sh [TEST...]   (default: the daemon-set scenarios below)
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ ! -f build-tsan-all/build.ninja ]; then
  meson setup build-tsan-all -Db_sanitize=thread -Dbuildtype=debug >build-tsan-all.setup.log 2>&1 ||
    { cat build-tsan-all.setup.log; exit 1; }
fi
nice ninja -C build-tsan-all >/dev/null || exit 1
tests=("$@")
[ ${#tests[@]} -eq 0 ] && tests=(e2e-contracts e2e-kill-fetcher e2e-kill-compute
  e2e-kill-scheduler e2e-concurrent e2e-client-gone e2e-dspark e2e-stop-strings e2e-admission
  e2e-faults e2e-api-chat e2e-api-abort e2e-api-concurrent)
reports=$(mktemp -d)
TSAN_OPTIONS="halt_on_error=0 log_path=$reports/tsan suppressions=$PWD/tests/tsan.supp" \
  meson test -C build-tsan-all --no-rebuild --num-processes 1 --print-errorlogs "${tests[@]}"
rc=$?
n=$(ls "$reports" | wc -l)
if [ "$n" -gt 0 ]; then
  echo "tsan-e2e: $n report file(s):"
  for f in "$reports"/*; do echo "== $f"; head -40 "$f"; done
  rc=1
else
  echo "tsan-e2e: no ThreadSanitizer report ($(grep -c '"result": "OK"' build-tsan-all/meson-logs/testlog.json) scenarios passed)"
fi
rm -rf "$reports"
exit $rc

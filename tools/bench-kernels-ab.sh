#!/bin/sh
# SPDX-License-Identifier: MIT
# A/B of the kernels in one run: builds bench-kernels of another commit (default
# HEAD~1) from `git archive` in a temporary directory, then runs that binary and
# this tree's build/tools/bench-kernels alternately, ROUNDS times each, with the
# same arguments, so both see the same machine state. Usage:
#   tools/bench-kernels-ab.sh [REV] [-- bench-kernels arguments]
# Environment: ROUNDS (default 2), BUILD (this tree's build dir, default build),
# SAME_TOOL=1 (A's bench-kernels built from this tree's tools/bench-kernels.c, so both
# sides measure alike and take the same options, e.g. --cpu-time, against A's kernels).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
rev=HEAD~1
if [ $# -gt 0 ] && [ "$1" != "--" ]; then rev=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
rounds=${ROUNDS:-2}
new="$root/${BUILD:-build}/tools/bench-kernels"
[ -x "$new" ] || { echo "bench-kernels-ab: $new missing (build this tree first)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$root" archive "$rev" | tar -x -C "$tmp"
[ "${SAME_TOOL:-0}" = 1 ] && cp "$root/tools/bench-kernels.c" "$tmp/tools/bench-kernels.c"
# the old tree's tokenizer fixtures need the npm packages; a bench build does not
[ -d "$root/tools/npm/node_modules" ] && ln -s "$root/tools/npm/node_modules" "$tmp/tools/npm/node_modules"
meson setup "$tmp/build" "$tmp" >"$tmp/setup.log" 2>&1 ||
    { cat "$tmp/setup.log" >&2; exit 1; }
ninja -C "$tmp/build" tools/bench-kernels >"$tmp/build.log" 2>&1 ||
    { cat "$tmp/build.log" >&2; exit 1; }
old="$tmp/build/tools/bench-kernels"
echo "A = $rev ($(git -C "$root" rev-parse --short "$rev")), B = working tree ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo +dirty)); args: $*"
i=1
while [ "$i" -le "$rounds" ]; do
    echo "## round $i: A"; "$old" "$@"
    echo "## round $i: B"; "$new" "$@"
    i=$((i + 1))
done

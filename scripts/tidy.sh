#!/usr/bin/env bash
# clang-tidy over the library and CLI sources (src/**/*.cc and the headers they include), with
# the checks of .clang-tidy; any finding fails. Reads the compile commands of a build folder
# (default build/, as scripts/build.sh leaves it). CUDA sources (.cu) are not checked. With
# -Wthread-safety, Clang's analysis of the ICECACHE_GUARDED_BY annotations (src/core/mutex.h).
#
#   scripts/tidy.sh [BUILD_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
[[ -f $BUILD/compile_commands.json ]] || {
  echo "tidy: no $BUILD/compile_commands.json (build first: scripts/build.sh)" >&2
  exit 2
}
cd "$ROOT"
# run-clang-tidy prints each file's findings and exits non-zero if any file had one (the config
# makes every check an error); its command line per file and counts of suppressed warnings are
# left out.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
run-clang-tidy -p "$BUILD" -j "$(nproc)" -quiet -extra-arg=-Wthread-safety "$ROOT/src/.*\.cc\$" >"$log" 2>&1 || rc=$?
grep -v "^clang-tidy-[0-9]* \|^[0-9]* warnings\? generated\.\|^Suppressed \|^Use -header-filter" \
  "$log" || true
files=$(grep -c "^clang-tidy-[0-9]* " "$log" || true)
if ((rc == 0)); then
  echo "tidy: $files files, no finding"
else
  echo "tidy: $files files, findings above (exit $rc)"
fi
exit "$rc"

#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, the libraries instrumented too) in their
# own build directory and runs each target for a while.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 60
#   TARGET              gguf_fuzz, safetensors_fuzz (default: every fuzz/*_fuzz.cc)
# Environment: ICECACHE_FUZZ_BUILD (build dir, default build-fuzz), FUZZ_JOBS (ninja -j, default 2),
#   FUZZ_MAX_LEN (default 65536), FUZZ_ARGS (extra libFuzzer flags).
# The growing corpus is kept in $ICECACHE_FUZZ_BUILD/corpus/<target>; crashes are written to
# $ICECACHE_FUZZ_BUILD/artifacts/. Exits non-zero if any target found a problem.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
shift || true
build="${ICECACHE_FUZZ_BUILD:-$root/build-fuzz}"
jobs="${FUZZ_JOBS:-2}"
max_len="${FUZZ_MAX_LEN:-65536}"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in "$root"/fuzz/*_fuzz.cc; do
    targets+=("$(basename "$src" .cc)")
  done
fi

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DICECACHE_FUZZ=ON \
  -DICECACHE_SANITIZE=fuzzer-no-link,address,undefined \
  -DICECACHE_BUILD_TESTS=OFF -DICECACHE_BUILD_BENCH=OFF -DICECACHE_CUDA=OFF >/dev/null
ninja -C "$build" -j "$jobs" make_fuzz_seeds "${targets[@]}"

seeds="$build/seeds"
"$build/fuzz/make_fuzz_seeds" "$seeds"
mkdir -p "$build/artifacts"

status=0
for t in "${targets[@]}"; do
  format="${t%_fuzz}"
  corpus="$build/corpus/$t"
  mkdir -p "$corpus"
  dict=()
  if [ -f "$root/fuzz/$format.dict" ]; then dict=(-dict="$root/fuzz/$format.dict"); fi
  seed_dir=()
  if [ -d "$seeds/$format" ]; then seed_dir=("$seeds/$format"); fi
  echo "== $t: ${seconds}s (corpus $corpus)"
  # shellcheck disable=SC2086
  if ! "$build/fuzz/$t" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
      "${dict[@]}" ${FUZZ_ARGS:-} "$corpus" "${seed_dir[@]}"; then
    echo "== $t: FAILED (see $build/artifacts/)"
    status=1
  else
    echo "== $t: no crashes in ${seconds}s"
  fi
done
exit $status

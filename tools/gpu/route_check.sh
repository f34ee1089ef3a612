#!/usr/bin/env bash
# A short GPU check of icecache's insertion routes on the device (--kv-route device): the CUDA
# tests of the route kernel and of the paths it joins (offloaded KV, device-side selection), then,
# while the deadline allows, one call of the 8B shape at 32K with routes on the host and on the
# device, each with --kv-stats (index update time per step, tokens placed each way).
#
#   tools/gpu/route_check.sh --bundle FILE [--deadline SECONDS] [--batch B]
# Output: $OUT (default out/gpu-route): tests.txt, bench_host.txt, bench_device.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out/gpu-route}
BUNDLE="" DEADLINE=150 BATCH=4
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --deadline) DEADLINE=$2; shift ;;
    --batch) BATCH=$2; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"
source "$ROOT/tools/gpu/log.sh"
source "$ROOT/tools/gpu/binaries.sh"
START=$(date +%s)
left() { echo $((DEADLINE - ($(date +%s) - START))); }

step "CUDA tests: routes, offload, device selection"
timeout "$(left)" "$TESTBIN" --gtest_color=no \
  --gtest_filter='CudaKeyRoute.*:CudaOffload.*:CudaPageSelect.*' >"$OUT/tests.txt" 2>&1 ||
  fail "backend_cuda_tests"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tiny \]|tests? ran" "$OUT/tests.txt"
for route in host device; do
  if (($(left) < 40)); then
    echo "deadline: bench with routes on the $route skipped"
    continue
  fi
  step "icecache budget 256, 32K, batch $BATCH, routes on the $route"
  timeout "$(left)" "$BIN" bench --device cuda --synthetic llama-3.1-8b --contexts 32768 \
    --decode 48 --repeats 1 --prefill-chunk 4096 --shared-prompt --batch "$BATCH" \
    --kv-policy icecache --kv-budget 256 --kv-route "$route" --kv-stats >"$OUT/bench_$route.txt" 2>&1
  rc=$?
  # A batch of 20 takes about 130 s per run, most of it setting up its host tier.
  if ((rc == 124)); then
    fail "bench $route: stopped at the deadline ($DEADLINE s); raise --deadline"
  elif ((rc != 0)); then
    fail "bench $route (exit $rc): $(tail -1 "$OUT/bench_$route.txt")"
  fi
  grep -E "tok/s|time per step|index update|insertion|^\|" "$OUT/bench_$route.txt" | head -20
done
exit $STATUS

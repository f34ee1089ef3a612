#!/usr/bin/env bash
# A short development loop on the H200 (a fraction of check_and_bench.sh's time): the CUDA tests
# (with SmolLM2 when it is at .cache/models), full-attention decode of the Llama-3.1-8B shape at
# the given contexts, icecache at 128K with --kv-stats (budget 2048), and the host-side bulk
# index build at 128K for several thread counts. Output: $OUT (default out/gpu-dev).
#
#   tools/gpu/dev_check.sh --bundle FILE [--skip-tests] [--contexts "4096 32768 131072"]
#                          [--ice-contexts "131072"] [--build-threads "1 4 16"]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out/gpu-dev}
BUNDLE="" TESTS=1 CONTEXTS="4096 32768 131072" ICE="131072" THREADS="1 4 16"
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --skip-tests) TESTS=0 ;;
    --contexts) CONTEXTS=$2; shift ;;
    --ice-contexts) ICE=$2; shift ;;
    --build-threads) THREADS=$2; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"
source "$ROOT/tools/gpu/log.sh"
source "$ROOT/tools/gpu/binaries.sh"
SYN=(--device cuda --synthetic llama-3.1-8b --decode 32 --repeats 1 --prefill-chunk 4096)

if [[ $TESTS == 1 ]]; then
  step "CUDA tests"
  timeout 400 "$TESTBIN" --gtest_color=no --gtest_brief=1 2>&1 | tail -30 || fail "backend_cuda_tests"
fi
for ctx in $CONTEXTS; do
  step "full attention, context $ctx"
  timeout 300 "$BIN" bench "${SYN[@]}" --contexts "$ctx" --kv-stats 2>&1 | grep -E "^\|  |time per step" || fail "bench $ctx"
done
for ctx in $ICE; do
  step "icecache budget 2048, context $ctx"
  timeout 300 "$BIN" bench "${SYN[@]}" --contexts "$ctx" --kv-policy icecache --kv-budget 2048 \
    --kv-stats 2>&1 | grep -vE "^$|^model|^each" || fail "icecache $ctx"
done
step "bulk index build at 128K (8 layers x 8 KV heads, bf16 pages)"
"$SELBENCH" build --context 128K --layers 8 --kv-heads 8 --threads "$(echo $THREADS | tr ' ' ,)" ||
  fail "selection_bench build"
exit $STATUS

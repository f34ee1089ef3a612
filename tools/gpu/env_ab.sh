#!/usr/bin/env bash
# A/B of an environment switch on the H200 in one run (e.g. ICECACHE_CUDA_PDL, _STACKED,
# ICECACHE_GEMV_SPLIT): the CUDA tests, then per value the attention parity tests and the
# prefill-attention micro-benchmark, then the Llama-3.1-8B-shape bench (prefill tokens/s,
# decode ms/step) for each value in turn, round after round, so that the machine's drift hits
# every variant alike.
#
#   tools/gpu/env_ab.sh --bundle FILE [--var ICECACHE_CUDA_PDL] [--values "1 0"]
#                       [--contexts "32768"] [--rounds 2] [--skip-tests]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUNDLE="" VAR=ICECACHE_CUDA_PDL VALUES="1 0" CONTEXTS="32768" ROUNDS=2 TESTS=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --var) VAR=$2; shift ;;
    --values) VALUES=$2; shift ;;
    --contexts) CONTEXTS=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --skip-tests) TESTS=0 ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-$ROOT/out/gpu-ab}
source "$ROOT/tools/gpu/log.sh"
source "$ROOT/tools/gpu/binaries.sh"
if [[ $TESTS == 1 ]]; then
  step "CUDA tests"
  timeout 400 "$TESTBIN" --gtest_color=no --gtest_brief=1 2>&1 | tail -30 || fail "backend_cuda_tests"
fi
for v in $VALUES; do
  step "$VAR=$v: attention parity tests, prefill attention micro-benchmark"
  env "$VAR=$v" timeout 200 "$TESTBIN" --gtest_color=no --gtest_brief=1 \
    --gtest_filter='CudaAttention.*:*Parity*' 2>&1 | tail -3 || fail "attention tests $v"
  env "$VAR=$v" timeout 120 "$OPSBENCH" --benchmark_filter=PrefillAttention \
    --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>&1 | grep -E "median" ||
    fail "cuda_ops_bench $v"
done
for r in $(seq "$ROUNDS"); do
  for v in $VALUES; do
    for ctx in $CONTEXTS; do
      step "round $r, $VAR=$v, context $ctx"
      env "$VAR=$v" timeout 300 "$BIN" bench --device cuda --synthetic llama-3.1-8b --decode 16 \
        --repeats 1 --prefill-chunk 4096 --contexts "$ctx" 2>&1 | grep -E "^\| " || fail "bench $v $ctx"
    done
  done
done
exit $STATUS

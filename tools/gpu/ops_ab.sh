#!/usr/bin/env bash
# Kernel microbenchmarks of two builds in one run: bundle A's and bundle B's cuda_ops_bench
# (tools/gpu/make_bundle.sh) on the same filter, alternating A and B for --rounds rounds so that
# the machine's drift hits both alike; with --b-env, a third run per round is B under those
# environment settings (say ICECACHE_CUDA_PDL=0, to take one change of B apart). Output goes to
# $OUT/run.log (default out/gpu-ops-ab).
#
#   tools/gpu/ops_ab.sh --a OLD.tar.xz --b NEW.tar.xz [--filter SelectPages] [--rounds 2]
#       [--b-env "NAME=VALUE ..."] [--tests FILTER]
# --tests FILTER runs bundle B's backend_cuda_tests on that gtest filter first.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
A="" B="" FILTER=SelectPages ROUNDS=2 B_ENV="" TESTS=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --a) A=$2; shift ;;
    --b) B=$2; shift ;;
    --filter) FILTER=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --b-env) B_ENV=$2; shift ;;
    --tests) TESTS=$2; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
[[ -f $A && -f $B ]] || { echo "need --a and --b bundles"; exit 2; }
OUT=${OUT:-$ROOT/out/gpu-ops-ab}
source "$ROOT/tools/gpu/log.sh"
source "$ROOT/tools/gpu/ab_bundles.sh"
declare -A OPS=([A]=${AB_DIR[A]}/bin/cuda_ops_bench [B]=${AB_DIR[B]}/bin/cuda_ops_bench)
if [[ -n $TESTS ]]; then
  step "bundle B: CUDA tests $TESTS"
  timeout 300 "${AB_DIR[B]}/bin/backend_cuda_tests" --gtest_color=no --gtest_brief=1 \
    --gtest_filter="$TESTS" 2>&1 | tail -8 || fail "CUDA tests"
fi
read -r -a env_b <<<"$B_ENV"
for ((r = 1; r <= ROUNDS; ++r)); do
  runs=(A B)
  [[ -n $B_ENV ]] && runs+=(B-env)
  for run in "${runs[@]}"; do
    step "round $r: $run${B_ENV:+ (B-env: $B_ENV)}"
    case $run in
      A) timeout 300 "${OPS[A]}" --benchmark_filter="$FILTER" 2>&1 | grep -E "^BM_|^---|Benchmark" ;;
      B) timeout 300 "${OPS[B]}" --benchmark_filter="$FILTER" 2>&1 | grep -E "^BM_|^---|Benchmark" ;;
      B-env) env "${env_b[@]}" timeout 300 "${OPS[B]}" --benchmark_filter="$FILTER" 2>&1 |
               grep -E "^BM_|^---|Benchmark" ;;
    esac
    [[ ${PIPESTATUS[0]} == 0 ]] || fail "$run round $r"
  done
done
step "done (status $STATUS)"
exit $STATUS

#!/usr/bin/env bash
# The open GPU items of issue 6 in one device call (docs/PERF.md, "Next GPU run" of 2026-12-06,
# 18:1x UTC), in order of what only an H200 can show:
#   1. the CUDA tests of the fetch (CudaPageSelect*, CudaOffload.*), with and without
#      ICECACHE_FETCH_BULK=1;
#   2. 5c: full attention at 32K, batches given by --full-batches (KV on the device);
#   3. 5a: 128K, batch 1, budget 2048, 64 steps: --kv-prefetch off, the defaults, and on with
#      ICECACHE_PREFETCH_PERCENT at each of --shares ("" for none); with --early, each share
#      also with ICECACHE_PREFETCH_EARLY=1 (the prefetch queued before the layer before attends;
#      --early-only: only so); with --chain, first the early prefetch at 1% with
#      ICECACHE_PREFETCH_CHAIN_STOP 1 and 2 (its forks and joins alone, then with the query's
#      estimate) and with ICECACHE_PREFETCH_HEADS=2 (a quarter of the estimate's product), to
#      time the chain's parts against --shares "1", after BM_ChainBeside (the same parts beside
#      one layer's products, in cuda_ops_bench);
#      With --behind, after the defaults: --kv-fetch behind (prefetch off), the deferred pages'
#      copies beside the rest of the step (CUDA test CudaOffload.FetchBehind* first);
#   4. 5c: icecache (budget 256, the defaults) at 32K and each batch of --ice-batch ("20 24"),
#      for the ratio in one call (0 skips it);
#   5. BM_FetchPages with and without the bulk copies, and where the kernel's mode 0 reads below
#      --slow-gbs, the 5a command with both fetches (prefetch off).
# Each step starts only while --deadline seconds (from the start) leave room for it.
#
#   tools/gpu/open_items.sh --bundle FILE [--full-batches "30 32"] [--deadline 560]
#       [--ice-batch "20 24"] [--shares "100 50 30"] [--early | --early-only] [--slow-gbs 40]
#       [--chain] [--behind] [--skip-tests] [--skip-5a]
# On an H100 (80 GB): --full-batches "" --ice-batch 0.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUNDLE="" FULL_BATCHES="30 32" DEADLINE=560 SLOW_GBS=40 SKIP_5A=0 SKIP_TESTS=0 ICE_BATCH=20 SHARES="100 50 30" EARLY=0 CHAIN=0 BEHIND=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --full-batches) FULL_BATCHES=$2; shift ;;
    --deadline) DEADLINE=$2; shift ;;
    --slow-gbs) SLOW_GBS=$2; shift ;;
    --skip-5a) SKIP_5A=1 ;;
    --skip-tests) SKIP_TESTS=1 ;;
    --ice-batch) ICE_BATCH=$2; shift ;;
    --shares) SHARES=$2; shift ;;
    --early) EARLY="0 1" ;;
    --early-only) EARLY=1 ;;
    --chain) CHAIN=1 ;;
    --behind) BEHIND=1 ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
[[ -f $BUNDLE ]] || { echo "need --bundle"; exit 2; }
OUT=${OUT:-$ROOT/out/gpu-open-items}
source "$ROOT/tools/gpu/log.sh"
source "$ROOT/tools/gpu/binaries.sh"
left() { echo $((DEADLINE - ($(date +%s) - START))); }
room() {  # seconds name
  if (($(left) < $1)); then echo "skipped $2: $(left) s left"; return 1; fi
}
date -u +"start %Y-%m-%dT%H:%M:%SZ" | tee "$OUT/times.txt"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

for var in ICECACHE_FETCH_BULK=0 ICECACHE_FETCH_BULK=1; do
  ((SKIP_TESTS)) && break
  step "CUDA tests of the fetch, $var"
  env "$var" timeout 120 "$TESTBIN" --gtest_color=no --gtest_brief=1 \
    --gtest_filter='CudaPageSelect*:CudaOffload.*' 2>&1 | grep -E "fetch now|^\[ *(FAILED|OK|PASSED|SKIPPED)|tests ran" | tail -12
  [[ ${PIPESTATUS[0]} -eq 0 ]] || fail "CUDA tests with $var"
done

for batch in $FULL_BATCHES; do
  room 130 "full batch $batch" || break
  step "5c: full attention, 32K, batch $batch"
  OUT=$OUT/full-b$batch bash "$ROOT/tools/gpu/batch_ab.sh" --bundle "$BUNDLE" --configs full \
    --batches "$batch" --decode 48 --bench-timeout 120 2>&1 | grep -E "^\| full|failed|tokens"
done

((SKIP_5A == 0)) && room 200 "5a" && {
  step "5a: 128K, batch 1, budget 2048: prefetch off, the defaults, on at percents: $SHARES"
  OUT=$OUT/5a-off bash "$ROOT/tools/gpu/builds_ab.sh" --context 131072 --batch 1 --budget 2048 \
    --decode 64 --timeout 100 --flags "--kv-prefetch off" off="$BUNDLE"
  OUT=$OUT/5a bash "$ROOT/tools/gpu/builds_ab.sh" --context 131072 --batch 1 --budget 2048 \
    --decode 64 --timeout 100 defaults="$BUNDLE"
  ((BEHIND)) && room 90 "fetch behind" && {
    step "5a with --kv-fetch behind (prefetch off)"
    OUT=$OUT/5a-behind bash "$ROOT/tools/gpu/builds_ab.sh" --context 131072 --batch 1 \
      --budget 2048 --decode 64 --timeout 100 --flags "--kv-prefetch off --kv-fetch behind" \
      behind="$BUNDLE"
  }
  ((CHAIN)) && {
    step "BM_ChainBeside: the prefetch's chain in parts beside a layer's products"
    timeout 120 "$OPSBENCH" --benchmark_filter=ChainBeside --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true 2>&1 | grep -E "median" | tee "$OUT/chain.txt"
  }
  for part in CHAIN_STOP=1 CHAIN_STOP=2 HEADS=2; do
    ((CHAIN)) || break
    room 90 "the chain's parts, $part" || break
    name=early1-$(echo "${part,,}" | tr -d '_=')
    ICECACHE_PREFETCH_EARLY=1 ICECACHE_PREFETCH_PERCENT=1 OUT=$OUT/5a-$name \
      bash "$ROOT/tools/gpu/builds_ab.sh" --context 131072 --batch 1 --budget 2048 \
      --decode 64 --timeout 100 --flags "--kv-prefetch on" "$name=$BUNDLE@ICECACHE_PREFETCH_$part"
  done
  for pct in $SHARES; do
    for early in $EARLY; do
      room 90 "prefetch at $pct percent, early $early" || break 2
      name=on$pct
      ((early)) && name=early$pct
      ICECACHE_PREFETCH_EARLY=$early OUT=$OUT/5a-$name \
        bash "$ROOT/tools/gpu/builds_ab.sh" --context 131072 --batch 1 --budget 2048 \
        --decode 64 --timeout 100 --flags "--kv-prefetch on" \
        "$name=$BUNDLE@ICECACHE_PREFETCH_PERCENT=$pct"
    done
  done
  grep -HE "time per step|^fetch|prefetch  |side work:" "$OUT"/5a*/*.err
}

for batch in $ICE_BATCH; do
  ((batch > 0)) || continue
  room 200 "icecache batch $batch" || break
  step "5c: icecache, 32K, budget 256, batch $batch (defaults)"
  OUT=$OUT/ice-b$batch bash "$ROOT/tools/gpu/builds_ab.sh" --context 32768 --batch "$batch" \
    --budget 256 --decode 48 --timeout 190 "icecache-b$batch=$BUNDLE"
done

room 40 "FetchPages" && {
  for bulk in 0 1; do
    step "BM_FetchPages, ICECACHE_FETCH_BULK=$bulk"
    ICECACHE_FETCH_BULK=$bulk timeout 60 "$OPSBENCH" --benchmark_filter=FetchPages \
      --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>&1 |
      grep -E "median" | tee "$OUT/fetch-bulk$bulk.txt"
  done
}
mode0=$(grep -E "mode:0" "$OUT/fetch-bulk0.txt" 2>/dev/null | grep -oE "GB/s=[0-9.]+" |
  head -1 | cut -d= -f2)
if [[ -n $mode0 ]] && awk "BEGIN { exit !($mode0 < $SLOW_GBS) }"; then
  room 200 "bulk A/B" && {
    step "slow kernel fetch ($mode0 GB/s): 5a with and without the bulk copies, prefetch off"
    OUT=$OUT/bulk bash "$ROOT/tools/gpu/builds_ab.sh" --context 131072 --batch 1 --budget 2048 \
      --decode 64 --timeout 100 --flags "--kv-prefetch off" off="$BUNDLE" \
      bulk="$BUNDLE@ICECACHE_FETCH_BULK=1"
  }
fi
date -u +"end %Y-%m-%dT%H:%M:%SZ" | tee -a "$OUT/times.txt"
step "done (status $STATUS)"
exit $STATUS

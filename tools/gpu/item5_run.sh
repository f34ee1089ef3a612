#!/usr/bin/env bash
# Issue 6, item 5 in one run: build, the offload tests, and the three benchmarks, then a summary
# with every target marked met or not (item5_summary.py). The defaults are the issue's matrix on
# one H200 with the Llama-3.1-8B shape (synthetic weights):
#   5a  batch 1 at 32K and 128K. Full attention with all KV on the device runs on its own (one
#       prefill per context). The offloaded configurations (quest, icecache, and lychee ranked
#       by centroid so that it selects on the device; budgets 256, 1024 and 2048) are forked from
#       one prefill per context (bench --kv-policies), so the matrix costs two long prefills, not
#       twenty; one more batch-1 run (icecache, budget 2048, largest context) gives the device
#       memory share, since a forked run's pool holds two sequences. Selection on a real model's
#       keys: SmolLM2 reads real text (.carry/real_text.txt) at 8K and 32K, forked into each
#       policy (lychee's own host search too), with --kv-timing for the select time per layer.
#   5b  128K under --device-mem-limit 24G: full attention at batch 1 (expected not to fit), then
#       icecache at batches 1, 2, ... until one fails.
#   5c  32K on the whole GPU: full attention and icecache (at each of --c-budgets) at increasing
#       batches, each up to its first failure; their best throughputs are compared. The host link
#       bounds an offloaded batch: about 54 GB/s over the bytes a step fetches per sequence, so
#       smaller budgets are part of the sweep.
# Batches share one prefilled prompt (--shared-prompt). Results go to $OUT (default
# out/gpu-item5): run.log, item5.jsonl (one JSON object per configuration) and summary.md.
#
#   tools/gpu/item5_run.sh [--bundle FILE] [--skip-tests] [--skip-real] [--skip-5a] [--skip-5b]
#       [--skip-5c] [--device cuda] [--shape llama-3.1-8b] [--contexts "32768 131072"]
#       [--budgets "256 1024 2048"] [--policies "quest icecache lychee:centroid"] [--decode 48]
#       [--real-contexts 8K,32K] [--real-policies "quest icecache lychee:centroid lychee"]
#       [--b-context 131072] [--mem-limit 24G] [--b-batches "1 2 3 4"]
#       [--c-context 32768] [--budget 2048 (icecache in 5b)] [--c-budgets "256 1024 2048"]
#       [--full-batches "8 16 24 32"]
#       [--ice-batches "1 8 16 20"] [--bench-timeout SECONDS] [--extra-flags "--kv-prefetch off"]
# --device cpu with --shape tiny and short contexts checks the script itself on any machine.
# --extra-flags adds options to every bench run (an engine setting to compare, say).
# 48 decode steps by default: an icecache list first takes in a page up to 31 steps after the
# prompt (once a page's worth of tokens has left the window, staggered over the lists), so
# shorter runs would leave most index updates out.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out/gpu-item5}
BUNDLE="" TESTS=1 REAL=1 DO_A=1 DO_B=1 DO_C=1 DEVICE=cuda SHAPE=llama-3.1-8b DECODE=48
CONTEXTS="32768 131072" BUDGETS="256 1024 2048" POLICIES="quest icecache lychee:centroid"
REAL_CONTEXTS=8K,32K REAL_POLICIES="quest icecache lychee:centroid lychee" B_CONTEXT=131072 MEM_LIMIT=24G B_BATCHES="1 2 3 4" C_CONTEXT=32768
BUDGET=2048 C_BUDGETS="256 1024 2048" FULL_BATCHES="8 16 24 32" ICE_BATCHES="1 8 16 20" TIMEOUT=300
EXTRA=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --skip-tests) TESTS=0 ;;
    --skip-real) REAL=0 ;;
    --skip-5a) DO_A=0 ;;
    --skip-5b) DO_B=0 ;;
    --skip-5c) DO_C=0 ;;
    --device) DEVICE=$2; shift ;;
    --shape) SHAPE=$2; shift ;;
    --contexts) CONTEXTS=$2; shift ;;
    --budgets) BUDGETS=$2; shift ;;
    --policies) POLICIES=$2; shift ;;
    --decode) DECODE=$2; shift ;;
    --real-contexts) REAL_CONTEXTS=$2; shift ;;
    --real-policies) REAL_POLICIES=$2; shift ;;
    --b-context) B_CONTEXT=$2; shift ;;
    --mem-limit) MEM_LIMIT=$2; shift ;;
    --b-batches) B_BATCHES=$2; shift ;;
    --c-context) C_CONTEXT=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --c-budgets) C_BUDGETS=$2; shift ;;
    --full-batches) FULL_BATCHES=$2; shift ;;
    --ice-batches) ICE_BATCHES=$2; shift ;;
    --bench-timeout) TIMEOUT=$2; shift ;;
    --extra-flags) EXTRA=$2; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
source "$ROOT/tools/gpu/log.sh"
rm -f "$OUT/item5.jsonl"

step "environment"
nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv 2>/dev/null ||
  echo "no nvidia-smi (device $DEVICE)"
step "build"
if [[ $DEVICE == cuda ]]; then
  source "$ROOT/tools/gpu/binaries.sh"
else
  BIN=${BIN:-$ROOT/build/icecache}
  [[ -x $BIN ]] || { echo "no $BIN: build the CPU binary first"; exit 1; }
fi
MODEL=$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf

if [[ $TESTS == 1 && $DEVICE == cuda ]]; then
  step "CUDA offload and device-selection tests"
  timeout 300 "$TESTBIN" --gtest_color=no --gtest_filter='CudaOffload*:CudaPageSelect*:CudaOps.ScatterI32*' ||
    fail "offload and device-selection tests"
fi

source "$ROOT/tools/gpu/bench_run.sh"
read -r -a EXTRA_ARGS <<<"$EXTRA"
run() {
  bench_run "$OUT/item5.jsonl" "$1" "$2" --device "$DEVICE" --kv-stats --json "${@:3}" \
    "${EXTRA_ARGS[@]}"
}

# entries "quest icecache" -> quest@256,icecache@256,quest@1024,... over $BUDGETS
entries() {
  local out=""
  for b in $BUDGETS; do
    for p in $1; do out+="${out:+,}$p@$b"; done
  done
  echo "$out"
}

SYN=(--synthetic "$SHAPE" --decode "$DECODE" --repeats 1 --prefill-chunk 4096)
if [[ $DO_A == 1 ]]; then
  for ctx in $CONTEXTS; do
    run "5a full $ctx" 1 "${SYN[@]}" --contexts "$ctx" --kv-offload off ||
      fail "5a full attention at $ctx"
    run "5a offloaded $ctx" 1 "${SYN[@]}" --contexts "$ctx" \
      --kv-policies "$(entries "$POLICIES")" ||
      fail "5a offloaded policies at $ctx"
  done
  # Device memory at batch 1: --kv-policies sizes its pool for the prefill and a fork, and the
  # page summaries are allocated for the whole pool, so the share comes from a run of its own. It
  # decodes 64 steps so that the summary can say which steps' index updates are slow (every
  # 16th, when a page leaves the window, or only the first).
  top=$(echo $CONTEXTS | tr ' ' '\n' | sort -n | tail -1)
  run "5a memory $top" 1 --synthetic "$SHAPE" --decode 64 --repeats 1 --prefill-chunk 4096 \
    --contexts "$top" --kv-policy icecache --kv-budget 2048 || fail "5a memory at $top"
  if [[ $REAL == 1 ]]; then
    if [[ -f $MODEL && -f $ROOT/.carry/real_text.txt ]]; then
      run "5a real keys" 1 -m default --contexts "$REAL_CONTEXTS" --decode 32 --repeats 1 \
        --text-file "$ROOT/.carry/real_text.txt" --kv-timing \
        --kv-policies "$(entries "$REAL_POLICIES")" ||
        fail "5a selection on real keys"
    else
      fail "5a real keys: $MODEL or .carry/real_text.txt is missing"
    fi
  fi
fi
if [[ $DO_B == 1 ]]; then
  run "5b full $B_CONTEXT under $MEM_LIMIT" 1 "${SYN[@]}" --shared-prompt --contexts "$B_CONTEXT" \
    --kv-offload off --device-mem-limit "$MEM_LIMIT" && echo "note: full attention fit"
  for b in $B_BATCHES; do
    run "5b icecache $B_CONTEXT under $MEM_LIMIT" "$b" "${SYN[@]}" --shared-prompt \
      --contexts "$B_CONTEXT" --kv-policy icecache --kv-budget "$BUDGET" \
      --device-mem-limit "$MEM_LIMIT" || break
  done
fi
if [[ $DO_C == 1 ]]; then
  for b in $FULL_BATCHES; do
    run "5c full $C_CONTEXT" "$b" "${SYN[@]}" --shared-prompt --contexts "$C_CONTEXT" \
      --kv-offload off || break
  done
  for budget in $C_BUDGETS; do
    for b in $ICE_BATCHES; do
      run "5c icecache $C_CONTEXT budget $budget" "$b" "${SYN[@]}" --shared-prompt \
        --contexts "$C_CONTEXT" --kv-policy icecache --kv-budget "$budget" || break
    done
  done
fi
rm -f "$OUT/tmp.json" "$OUT/tmp.err"
step "summary"
python3 "$ROOT/tools/gpu/item5_summary.py" "$OUT/item5.jsonl" | tee "$OUT/summary.md" ||
  fail "summary"
step "done (status $STATUS)"
exit $STATUS

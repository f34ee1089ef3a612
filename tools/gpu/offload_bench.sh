#!/usr/bin/env bash
# Sparse KV policies on an H200 with the KV offloaded (issue 6): the host tier in pinned host
# memory, selection on the device (quest and icecache, --kv-select auto) or on the host (lychee,
# or a policy written "name:host"), the device working set and the multi-segment decode kernel.
# One run: build (or unpack a bundle from make_bundle.sh), the offload tests, a memcheck of a
# sparse generation, the needle eval of SmolLM2 on the GPU (same settings as the CPU run of
# docs/ACCURACY.md), and batch-1 decode benchmarks on the Llama-3.1-8B shape (synthetic
# weights): full attention with all KV on the device against each sparse policy, offloaded,
# with their --kv-stats. Device-selecting policies run twice: once as timed (no waits inside a
# step) and once with --kv-timing for the select/fetch/attend split. Results go to $OUT (default out/gpu-offload): run.log, bench.jsonl,
# needle_gpu.md and needle_gpu.jsonl. The haystack is read from .carry/pg_essays (a copy of
# ../shared/data/haystack/pg_essays, which does not travel).
#
#   tools/gpu/offload_bench.sh [--bundle FILE] [--skip-tests] [--skip-eval] [--skip-bench]
#       [--contexts "32768"] [--budgets "2048"] [--policies "quest quest:host icecache lychee"]
#       [--decode N] [--prefill-chunk N] [--bench-timeout SECONDS]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out/gpu-offload}
BUNDLE="" TESTS=1 EVAL=1 BENCH=1 DECODE=16 CHUNK=4096 LIMIT=600
CONTEXTS="32768" BUDGETS="2048" POLICIES="quest quest:host icecache lychee"
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --skip-tests) TESTS=0 ;;
    --skip-eval) EVAL=0 ;;
    --skip-bench) BENCH=0 ;;
    --contexts) CONTEXTS=$2; shift ;;
    --budgets) BUDGETS=$2; shift ;;
    --policies) POLICIES=$2; shift ;;
    --decode) DECODE=$2; shift ;;
    --prefill-chunk) CHUNK=$2; shift ;;
    --bench-timeout) LIMIT=$2; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
source "$ROOT/tools/gpu/log.sh"

step "environment"
nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv || true
step "build"
source "$ROOT/tools/gpu/binaries.sh"
MODEL=$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf

if [[ $TESTS == 1 ]]; then
  step "offload tests (CudaOffload*)"
  timeout 600 "$TESTBIN" --gtest_color=no --gtest_filter='CudaOffload*:CudaPageSelect*' ||
    fail "offload and device-selection tests"
  step "compute-sanitizer memcheck: sparse decode with the KV offloaded (synthetic tiny)"
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [[ -z $CS ]]; then
    fail "compute-sanitizer not found"
  else
    for p in quest icecache; do
      timeout 300 "$CS" --tool memcheck --error-exitcode 3 --print-limit 20 "$BIN" bench \
        --synthetic tiny --device cuda --contexts 600 --decode 8 --repeats 1 --prefill-chunk 128 \
        --kv-policy $p --kv-budget 128 || fail "memcheck ($p)"
    done
  fi
fi

if [[ $EVAL == 1 && -f $MODEL ]]; then
  step "needle on the GPU: SmolLM2, 2K and 4K, full/quest/icecache/lychee, budgets 128 and 1024"
  timeout 900 "$BIN" eval needle -m default --device cuda --haystack "$ROOT/.carry/pg_essays" \
    --lengths 2K,4K --policies full,quest,icecache,lychee --budgets 128,1024 --limit 4 \
    --out /tmp/icecache-needle-gpu --progress never || fail "needle eval"
  cp /tmp/icecache-needle-gpu/needle.md "$OUT/needle_gpu.md"
  cp /tmp/icecache-needle-gpu/needle.jsonl "$OUT/needle_gpu.jsonl"
fi

if [[ $BENCH == 1 ]]; then
  SYN=(--synthetic llama-3.1-8b --device cuda --decode "$DECODE" --repeats 1
       --prefill-chunk "$CHUNK" --kv-stats --json)
  for ctx in $CONTEXTS; do
    step "Llama-3.1-8B shape, context $ctx: full attention, all KV on the device"
    timeout "$LIMIT" "$BIN" bench "${SYN[@]}" --contexts "$ctx" --kv-offload off \
      >"$OUT/tmp.json" 2>"$OUT/tmp.err" || fail "bench full $ctx"
    cat "$OUT/tmp.err"; python3 -c 'import json,sys; print(json.dumps({"policy": "full", **json.load(open(sys.argv[1]))["results"][0]}))' "$OUT/tmp.json" >>"$OUT/bench.jsonl"
    for b in $BUDGETS; do
      for spec in $POLICIES; do
        p=${spec%%:*} where=auto
        [[ $spec == *:* ]] && where=${spec#*:}
        runs=("")
        [[ ($p == quest || $p == icecache) && $where != host ]] && runs=("" "--kv-timing")
        for extra in "${runs[@]}"; do
          step "Llama-3.1-8B shape, context $ctx: $p budget $b, KV offloaded, select $where $extra"
          timeout "$LIMIT" "$BIN" bench "${SYN[@]}" --contexts "$ctx" --kv-policy "$p" \
            --kv-budget "$b" --kv-select "$where" $extra >"$OUT/tmp.json" 2>"$OUT/tmp.err" ||
            fail "bench $spec $b $ctx"
          cat "$OUT/tmp.err"; python3 -c 'import json,sys; print(json.dumps({"policy": sys.argv[2], "budget": int(sys.argv[3]), "select": sys.argv[4], "timing": sys.argv[5] != "", **json.load(open(sys.argv[1]))["results"][0]}))' "$OUT/tmp.json" "$p" "$b" "$where" "$extra" >>"$OUT/bench.jsonl"
        done
      done
    done
  done
  rm -f "$OUT/tmp.json" "$OUT/tmp.err"
fi
step "done (status $STATUS)"
exit $STATUS

#!/usr/bin/env bash
# Sparse KV policies on an H200 with the KV offloaded (issue 6): the host tier in pinned host
# memory, selection on the device (quest, icecache, and lychee written "lychee:centroid";
# --kv-select auto) or on the host (lychee's bound search, or a policy written "name:host"), the
# device working set and the multi-segment decode kernel.
# One run: build (or unpack a bundle from make_bundle.sh), the offload and device-selection tests
# (--all-tests: every CUDA test), a memcheck of a sparse generation, the needle and fidelity
# evals of SmolLM2 on the GPU (full, icecache and lychee at budgets 64 to 1024, with the settings
# of the CPU run in docs/ACCURACY.md), selection on keys of a real model (SmolLM2 reading real
# text, --real-contexts, each policy prefilling the text itself), and batch-1 decode benchmarks
# on the Llama-3.1-8B shape (synthetic weights): full attention with all KV on the device against
# each sparse policy, offloaded, with their --kv-stats.
# Device-selecting policies run twice: once as timed (no waits inside a step) and once with
# --kv-timing for the select/fetch/attend split. Results go to $OUT (default out/gpu-offload):
# run.log, bench.jsonl, real.jsonl, needle_gpu.{md,jsonl} and fidelity_gpu.{md,jsonl}. The model
# is .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf; the haystack, the task and the real text are
# read from .carry/pg_essays, .carry/leval/gov_report_summ.jsonl and .carry/real_text.txt (made
# from ../shared/data, which does not travel; tools/meas/leval_text.py writes the text).
#
#   tools/gpu/offload_bench.sh [--bundle FILE] [--skip-tests | --all-tests] [--skip-eval]
#       [--skip-bench] [--eval-lengths 2K,4K,8K] [--eval-limit 10]
#       [--eval-policies full,icecache:centroid,lychee,lychee:centroid]
#       [--real-contexts 8K,32K] [--real-budgets "256 1024"] [--skip-real]
#       [--contexts "32768"] [--budgets "2048"]
#       [--policies "quest quest:host icecache lychee lychee:centroid"]
#       [--decode N] [--prefill-chunk N] [--bench-timeout SECONDS]
# A policy NAME:X runs NAME with --kv-select X when X is host, device or auto, else with
# --kv-rank X.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out/gpu-offload}
FILTER='CudaOffload*:CudaPageSelect*' BUNDLE="" TESTS=1 EVAL=1 BENCH=1 DECODE=16 CHUNK=4096 LIMIT=600 EVAL_LENGTHS=2K,4K,8K EVAL_LIMIT=10
CONTEXTS="32768" BUDGETS="2048" POLICIES="quest quest:host icecache lychee lychee:centroid"
EVAL_POLICIES=full,icecache:centroid,lychee,lychee:centroid REAL=1 REAL_CONTEXTS=8K,32K
REAL_BUDGETS="256 1024"
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --skip-tests) TESTS=0 ;;
    --all-tests) FILTER='*' ;;
    --skip-eval) EVAL=0 ;;
    --skip-bench) BENCH=0 ;;
    --skip-real) REAL=0 ;;
    --eval-policies) EVAL_POLICIES=$2; shift ;;
    --real-contexts) REAL_CONTEXTS=$2; shift ;;
    --real-budgets) REAL_BUDGETS=$2; shift ;;
    --eval-lengths) EVAL_LENGTHS=$2; shift ;;
    --eval-limit) EVAL_LIMIT=$2; shift ;;
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
  step "CUDA tests ($FILTER)"
  timeout 600 "$TESTBIN" --gtest_color=no --gtest_filter="$FILTER" ||
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

if [[ $EVAL == 1 ]]; then
  # The settings of the CPU comparison run in docs/ACCURACY.md ("The same evals on the GPU").
  [[ -f $MODEL ]] || fail "eval: $MODEL is missing (join the model's parts first)"
  EV=(-m default --device cuda --lengths "$EVAL_LENGTHS" --policies "$EVAL_POLICIES"
      --budgets 64,128,256,1024 --progress never)
  step "needle on the GPU: SmolLM2, $EVAL_LENGTHS, $EVAL_POLICIES, budgets 64-1024"
  rm -rf /tmp/icecache-needle-gpu /tmp/icecache-fidelity-gpu
  timeout 900 "$BIN" eval needle "${EV[@]}" --haystack "$ROOT/.carry/pg_essays" \
    --limit "$EVAL_LIMIT" --out /tmp/icecache-needle-gpu || fail "needle eval"
  cp /tmp/icecache-needle-gpu/needle.md "$OUT/needle_gpu.md"
  cp /tmp/icecache-needle-gpu/needle.jsonl "$OUT/needle_gpu.jsonl"
  step "fidelity on the GPU: gov_report_summ, $EVAL_LENGTHS, 128 steps, 32 generated tokens"
  timeout 900 "$BIN" eval fidelity "${EV[@]}" --task "$ROOT/.carry/leval/gov_report_summ.jsonl" \
    --limit 2 --steps 128 --gen-tokens 32 --out /tmp/icecache-fidelity-gpu || fail "fidelity eval"
  cp /tmp/icecache-fidelity-gpu/fidelity.md "$OUT/fidelity_gpu.md"
  cp /tmp/icecache-fidelity-gpu/fidelity.jsonl "$OUT/fidelity_gpu.jsonl"
fi

# "name:x" -> P (policy) and FLAGS (--kv-select x or --kv-rank x); DEVSEL 1 when it selects on
# the device (then it is timed twice: as is, and with --kv-timing).
parse_spec() {
  P=${1%%:*} FLAGS=() DEVSEL=0
  local x=""
  [[ $1 == *:* ]] && x=${1#*:}
  case $x in
    "") ;;
    host|device|auto) FLAGS=(--kv-select "$x") ;;
    *) FLAGS=(--kv-rank "$x") ;;
  esac
  [[ ($P == quest || $P == icecache || $x == centroid || $x == device) && $x != host ]] && DEVSEL=1
}

if [[ $REAL == 1 ]]; then
  # Keys of a real model: SmolLM2 prefills real text with each policy's own index (no forks, so
  # lychee cuts its chunks at the text's boundaries), then decodes; --kv-timing splits the step.
  [[ -f $MODEL && -f $ROOT/.carry/real_text.txt ]] ||
    fail "real keys: the model or .carry/real_text.txt is missing"
  for b in $REAL_BUDGETS; do
    for spec in quest icecache lychee:centroid lychee; do
      parse_spec "$spec"
      step "SmolLM2 on real text, contexts $REAL_CONTEXTS: $spec budget $b, KV offloaded"
      timeout "$LIMIT" "$BIN" bench -m default --device cuda --contexts "$REAL_CONTEXTS" \
        --decode 32 --repeats 1 --text-file "$ROOT/.carry/real_text.txt" --kv-policy "$P" \
        --kv-budget "$b" "${FLAGS[@]}" --kv-timing --kv-stats --json >"$OUT/tmp.json" \
        2>"$OUT/tmp.err" || fail "real-key bench $spec $b"
      cat "$OUT/tmp.err"
      python3 -c 'import json,sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(json.dumps({"policy": sys.argv[2], "budget": int(sys.argv[3]), **r}))' \
        "$OUT/tmp.json" "$spec" "$b" >>"$OUT/real.jsonl"
    done
  done
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
        parse_spec "$spec"
        runs=("")
        [[ $DEVSEL == 1 ]] && runs=("" "--kv-timing")
        for extra in "${runs[@]}"; do
          step "Llama-3.1-8B shape, context $ctx: $spec budget $b, KV offloaded $extra"
          timeout "$LIMIT" "$BIN" bench "${SYN[@]}" --contexts "$ctx" --kv-policy "$P" \
            --kv-budget "$b" "${FLAGS[@]}" $extra >"$OUT/tmp.json" 2>"$OUT/tmp.err" ||
            fail "bench $spec $b $ctx"
          cat "$OUT/tmp.err"; python3 -c 'import json,sys; print(json.dumps({"policy": sys.argv[2], "budget": int(sys.argv[3]), "timing": sys.argv[4] != "", **json.load(open(sys.argv[1]))["results"][0]}))' "$OUT/tmp.json" "$spec" "$b" "$extra" >>"$OUT/bench.jsonl"
        done
      done
    done
  done
  rm -f "$OUT/tmp.json" "$OUT/tmp.err"
fi
step "done (status $STATUS)"
exit $STATUS

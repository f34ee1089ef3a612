#!/usr/bin/env bash
# One run on an H200 (any Hopper GPU): build (or unpack a prebuilt bundle from make_bundle.sh),
# the CUDA parity tests, a compute-sanitizer memcheck of short generations, SmolLM2 greedy
# generation on CPU and GPU (when the model is at .cache/models), and the benchmarks of issue 5
# item 7 side by side with PyTorch (tools/gpu/torch_reference_bench.py): Llama-3.1-8B shape with
# synthetic weights, prefill tokens/s and decode ms/step at 4K, 32K and 128K context (batch 1)
# and at 32K with the largest batch that fits, plus the bandwidth floor. Results go to $OUT
# (default out/gpu): run.log, summary.md, results.json; the table is printed last.
#
#   tools/gpu/check_and_bench.sh [--bundle FILE] [--skip-tests] [--skip-bench] [--no-torch]
#                                [--no-compile] [--contexts "4096 32768 131072"] [--decode N]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out/gpu}
BUNDLE="" TESTS=1 BENCH=1 TORCH=1 COMPILE=1 DECODE=32
CONTEXTS="4096 32768 131072"
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --skip-tests) TESTS=0 ;;
    --skip-bench) BENCH=0 ;;
    --no-torch) TORCH=0 ;;
    --no-compile) COMPILE=0 ;;
    --contexts) CONTEXTS=$2; shift ;;
    --decode) DECODE=$2; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
TMPD=${TMPDIR:-/tmp}/icecache-gpu-run  # raw outputs (only the merged files go to $OUT)
rm -rf "$TMPD"
mkdir -p "$TMPD"
source "$ROOT/tools/gpu/log.sh"

step "environment"
nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version,clocks.sm --format=csv || true
command -v nvcc >/dev/null && nvcc --version | tail -1

step "build"
source "$ROOT/tools/gpu/binaries.sh"
MODEL=$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
[[ -f $MODEL ]] || echo "SmolLM2 not at .cache/models: its GPU parity checks are skipped"

if [[ $TESTS == 1 ]]; then
  step "CUDA tests (backend parity, attention, sampling, models)"
  timeout 900 "$TESTBIN" --gtest_color=no || fail "backend_cuda_tests"

  step "compute-sanitizer memcheck of short generations"
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [[ -z $CS ]]; then
    fail "compute-sanitizer not found"
  else
    timeout 600 "$CS" --tool memcheck --error-exitcode 3 --print-limit 20 "$BIN" bench \
      --synthetic tiny --device cuda --contexts 300 --decode 8 --repeats 1 --batch 2 \
      --prefill-chunk 128 || fail "memcheck (synthetic tiny, batch 2)"
    if [[ -f $MODEL ]]; then
      timeout 600 "$CS" --tool memcheck --error-exitcode 3 --print-limit 20 "$BIN" generate \
        -m default --device cuda -p "The capital of France is" -n 8 --temp 0 ||
        fail "memcheck (SmolLM2 generate)"
    fi
  fi

  if [[ -f $MODEL ]]; then
    step "SmolLM2: icecache generate on CPU and GPU (greedy, 16 tokens, fixture prompts)"
    python3 - "$ROOT" <<'PY' >"$TMPD/tmp_prompts.txt"
import json, sys
fx = json.load(open(sys.argv[1] + "/tests/data/reference/smollm2.json"))
for p in fx["prompts"]:
    if "messages" not in p and len(p["input_ids"]) < 200:
        print(p["text"].replace("\n", " "))
PY
    while IFS= read -r prompt; do
      a=$("$BIN" generate -m default --device cpu -p "$prompt" -n 16 --temp 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
      b=$("$BIN" generate -m default --device cuda -p "$prompt" -n 16 --temp 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
      echo "prompt: ${prompt:0:60}..."; echo "  cpu:  $a"; echo "  cuda: $b"
      [[ "$a" == "$b" ]] || echo "  (differs)"
    done <"$TMPD/tmp_prompts.txt"
  fi
fi

if [[ $BENCH == 1 ]]; then
  step "kernel micro-benchmarks (Llama-3.1-8B shapes)"
  timeout 300 "$OPSBENCH" --benchmark_min_time=0.1 || fail "cuda_ops_bench"

  step "device copy bandwidth"
  python3 "$ROOT/tools/gpu/torch_reference_bench.py" --bandwidth | tee "$TMPD/tmp_bandwidth.json"

  SYN=(--synthetic llama-3.1-8b --device cuda)
  for ctx in $CONTEXTS; do
    step "IceCache: Llama-3.1-8B shape, context $ctx, batch 1"
    ICECACHE_CUDA_TIMING=1 timeout 600 "$BIN" bench "${SYN[@]}" --contexts "$ctx" \
      --decode "$DECODE" --repeats 1 --prefill-chunk 4096 --json >"$TMPD/tmp_ours_$ctx.json" \
      2>"$TMPD/tmp_ours_$ctx.err" || fail "bench $ctx"
    cat "$TMPD/tmp_ours_$ctx.err"; grep -E '"(prefill|decode)_' "$TMPD/tmp_ours_$ctx.json"
  done
  step "IceCache: context 32768, the largest batch that fits (one prompt forked)"
  FREE=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
  B=$(((FREE - 15317 - 1800) / 4134))
  for try in 0 1 2 3; do
    ICECACHE_CUDA_TIMING=1 timeout 600 "$BIN" bench "${SYN[@]}" --contexts 32768 --batch "$B" \
      --shared-prompt --decode 16 --repeats 1 --prefill-chunk 2048 --json \
      >"$TMPD/tmp_ours_32768_b$B.json" 2>"$TMPD/tmp_ours_32768_b$B.err" && break
    tail -2 "$TMPD/tmp_ours_32768_b$B.err"; rm -f "$TMPD/tmp_ours_32768_b$B."*
    B=$((B - 1))
  done
  echo "batch $B"; cat "$TMPD/tmp_ours_32768_b$B.err" 2>/dev/null

  if [[ $TORCH == 1 ]]; then
    step "PyTorch (transformers, sdpa, static cache), eager"
    PYTHONUNBUFFERED=1 timeout 900 python3 "$ROOT/tools/gpu/torch_reference_bench.py" \
      --contexts "${CONTEXTS// /,}" --decode "$DECODE" | tee "$TMPD/tmp_torch_eager.jsonl" ||
      fail "torch eager"
    PYTHONUNBUFFERED=1 timeout 600 python3 "$ROOT/tools/gpu/torch_reference_bench.py" \
      --contexts 32768 --batch "$B" --decode 16 | tee "$TMPD/tmp_torch_batch.jsonl" ||
      fail "torch batch"
    # A first summary, in case the compile below runs out of time.
    python3 "$ROOT/tools/gpu/summarize_bench.py" "$TMPD" "$OUT" >/dev/null
    if [[ $COMPILE == 1 ]]; then
      step "PyTorch, torch.compile (reduce-overhead) decode, context 32768"
      PYTHONUNBUFFERED=1 timeout "${COMPILE_TIMEOUT:-600}" python3 \
        "$ROOT/tools/gpu/torch_reference_bench.py" --contexts 32768 --decode "$DECODE" --compile |
        tee "$TMPD/tmp_torch_compiled.jsonl" || fail "torch compiled"
    fi
  fi
  step "summary"
  python3 "$ROOT/tools/gpu/summarize_bench.py" "$TMPD" "$OUT"
fi
echo
echo "done in $(($(date +%s) - START))s, status $STATUS"
exit $STATUS

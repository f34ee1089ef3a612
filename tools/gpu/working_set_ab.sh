#!/usr/bin/env bash
# The larger working set (--kv-working-set) on a GPU, in one device call (docs/PERF.md, "A larger
# working set"): the CUDA tests of the page map first (CudaPageSelect*, CudaOffload.*: the parity
# test compares the map's slot order with the CPU reference), then the synthetic 8B shape with the
# prefetch off, each at the default working set and a larger one:
#   1. 128K, batch 1, budget 2048 (issue 6's 5a), and 16384 tokens per list;
#   2. 32K, batch 8, budget 256, and 32768 tokens per list (every token: no fetch after warm-up).
# Each run starts only while --deadline seconds (from the start) leave room for it.
#
#   tools/gpu/working_set_ab.sh --bundle FILE [--deadline 560] [--skip-tests]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUNDLE="" DEADLINE=560 SKIP_TESTS=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --deadline) DEADLINE=$2; shift ;;
    --skip-tests) SKIP_TESTS=1 ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
[[ -f $BUNDLE ]] || { echo "need --bundle"; exit 2; }
OUT=${OUT:-$ROOT/out/gpu-working-set}
source "$ROOT/tools/gpu/log.sh"
source "$ROOT/tools/gpu/binaries.sh"
left() { echo $((DEADLINE - ($(date +%s) - START))); }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

if ((!SKIP_TESTS)); then
  step "CUDA tests of the page map and the offloaded path"
  timeout 150 "$TESTBIN" --gtest_filter='CudaPageSelect*:CudaOffload.*' >"$OUT/tests.log" 2>&1 ||
    fail "CUDA tests (status $?)"
  grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]' "$OUT/tests.log" | head -20
fi

A=(--context 131072 --batch 1 --budget 2048 --decode 64 --timeout 100)
C=(--context 32768 --batch 8 --budget 256 --decode 48 --timeout 110)
run() {  # seconds name args...
  local need=$1 name=$2; shift 2
  if (($(left) < need)); then echo "skipped $name: $(left) s left"; return; fi
  step "$name"
  OUT=$OUT bash "$ROOT/tools/gpu/builds_ab.sh" "$@" 2>&1 | grep -v '^$'
  grep -hE 'fetch|time per step|working set' "$OUT/${name}.err" | grep -v 'step trace' | head -8
}
run 110 off "${A[@]}" --flags "--kv-prefetch off" off="$BUNDLE"
run 110 ws16k "${A[@]}" --flags "--kv-prefetch off --kv-working-set 16384" ws16k="$BUNDLE"
run 120 b8 "${C[@]}" --flags "--kv-prefetch off" b8="$BUNDLE"
run 120 b8ws "${C[@]}" --flags "--kv-prefetch off --kv-working-set 32768" b8ws="$BUNDLE"

python3 - "$OUT" off ws16k b8 b8ws <<'PY'
import json, sys
out = sys.argv[1]
print("| run | ms/step | ms/step steady | tokens/s (all) | pages fetched/step | hit rate | working set MiB |")
print("|:--|--:|--:|--:|--:|--:|--:|")
for name in sys.argv[2:]:
    try:
        r = json.load(open(f"{out}/{name}.json"))["results"][0]
        kv = r["kv"]
    except Exception:
        print(f"| {name} | not run or failed | | | | | |")
        continue
    print(f"| {name} | {r['decode_ms_per_step']:.2f} | {r['decode_ms_per_step_steady']:.2f} | "
          f"{r['decode_tokens_per_second_all']:.1f} | {kv['pages_fetched']:.1f} | "
          f"{100 * kv['hit_rate']:.1f}% | {kv['working_set_bytes'] / 2**20:.1f} |")
PY
exit $STATUS

#!/usr/bin/env bash
# Times the same batched decode with several builds on one machine, one after the other, each
# with ICECACHE_TRACE_STEPS=1: to tell a change from the machine. Llama-3.1-8B shape, synthetic
# weights, batch forked from one prompt, icecache (device selection). Writes NAME.json and
# NAME.err (with the step trace) per build under $OUT and prints a table.
#
#   tools/gpu/builds_ab.sh [--context 32768] [--batch 12] [--budget 256] [--decode 48]
#       [--timeout 250] [--flags "--kv-prefetch off"] NAME=BUNDLE [NAME=BUNDLE ...]
# Batch 20 at 32K (a fork of 20 x 4 GiB of pinned host KV) took over 190 s on an H100.
# Extra environment for one build: NAME=BUNDLE@VAR=VALUE (one variable).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CONTEXT=32768 BATCH=12 BUDGET=256 DECODE=48 TIMEOUT=250 FLAGS="" BUILDS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --context) CONTEXT=$2; shift ;;
    --batch) BATCH=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --decode) DECODE=$2; shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    --flags) FLAGS=$2; shift ;;
    *=*) BUILDS+=("$1") ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
[[ ${#BUILDS[@]} -gt 0 ]] || { echo "need NAME=BUNDLE"; exit 2; }
OUT=${OUT:-$ROOT/out/gpu-builds-ab}
mkdir -p "$OUT"
for spec in "${BUILDS[@]}"; do
  name=${spec%%=*} rest=${spec#*=}
  bundle=${rest%%@*} extra=""
  [[ $rest == *@* ]] && extra=${rest#*@}
  dir=/tmp/icecache-build-$name
  rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xJf "$bundle" || { echo "bad bundle $bundle"; continue; }
  echo "=== $name ($bundle${extra:+, $extra}): batch $BATCH, context $CONTEXT, budget $BUDGET $FLAGS"
  # shellcheck disable=SC2086
  env ICECACHE_TRACE_STEPS=1 $extra LD_LIBRARY_PATH="$dir/lib" timeout "$TIMEOUT" "$dir/bin/icecache" \
    bench --synthetic llama-3.1-8b --device cuda --contexts "$CONTEXT" --decode "$DECODE" \
    --repeats 1 --prefill-chunk 4096 --shared-prompt --batch "$BATCH" --kv-stats --json \
    --kv-policy icecache --kv-budget "$BUDGET" $FLAGS >"$OUT/$name.json" 2>"$OUT/$name.err" ||
    echo "failed (status $?): $(grep -v 'step trace' "$OUT/$name.err" | tail -1)"
done
python3 - "$OUT" "${BUILDS[@]}" <<'PY'
import json, re, statistics, sys
out = sys.argv[1]
print("| build | ms/step | tokens/s | median step 1-15 | median gap | median grow | median stage | "
      "median prepare | median layers | median sample |")
print("|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
for spec in sys.argv[2:]:
    name = spec.split("=", 1)[0]
    try:
        r = json.load(open(f"{out}/{name}.json"))["results"][0]
    except Exception:
        print(f"| {name} | failed |" + " |" * 8); continue
    steps = [l for l in open(f"{out}/{name}.err") if "step trace" in l]
    steps = [l for l in steps if f"length {r.get('context', 0)}" not in l]
    def col(key, lines):
        return [float(re.search(rf"{key} (-?[0-9.]+)", l).group(1)) for l in lines]
    long = [l for l in steps if int(re.search(r"length (\d+)", l).group(1)) > 1024]
    early = long[1:16]
    med = lambda v: statistics.median(v) if v else float("nan")
    # gap (host time between the last step's ids and this step's forward pass) is -1 on a
    # loop's first step and absent from traces of builds before it.
    gaps = [g for g in col('gap', [l for l in long if ' gap ' in l]) if g >= 0]
    phases = " | ".join(f"{med(col(k, long)):.3f}" for k in ("grow", "stage", "prepare", "layers", "sample"))
    print(f"| {name} | {r['decode_ms_per_step']:.2f} | {r['decode_tokens_per_second_all']:.1f} | "
          f"{med(col('step', early)):.2f} | {med(gaps):.3f} | {phases} |")
PY

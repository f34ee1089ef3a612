#!/usr/bin/env bash
# A/B of one engine setting that lives in the environment (ICECACHE_CUDA_LANES=0 against the
# default, say) or in the flags (--a-flags "--index-update after") on batched decode, H200,
# Llama-3.1-8B shape with synthetic weights, every batch forked from one prefilled prompt. Runs A
# and B alternately per (batch, configuration) so that the machine's drift hits both alike; prints
# each run's --kv-stats lines and a table, and writes one JSON line per run to
# $OUT/batch_ab.jsonl.
#
#   tools/gpu/batch_ab.sh --bundle FILE [--context 32768] [--batches "8 16"]
#       [--configs "icecache:256"] [--decode 48] [--a-env "ICECACHE_CUDA_LANES=0"] [--b-env ""]
#       [--a-flags ""] [--b-flags ""] [--tests FILTER] [--bench-timeout 240]
# A configuration is POLICY:BUDGET ("full" alone: full attention with all KV on the device, run
# once per batch, not A/B); --a-flags and --b-flags add options to one side's sparse runs.
# --tests runs the bundle's CUDA tests matching the gtest FILTER first. Two or more builds on one
# machine: tools/gpu/builds_ab.sh. Each run's stderr is kept as run-N-SIDE-bBATCH.err (with
# ICECACHE_TRACE_STEPS=1 in an env, its step trace).
# A run forks the prompt's host KV once per sequence: at 32K on the 8B shape batch 8 took about
# 85 s on the H200 and batch 16 needs about 150 s, hence the default timeout.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUNDLE="" CONTEXT=32768 BATCHES="8 16" CONFIGS="icecache:256" DECODE=48
A_ENV="ICECACHE_CUDA_LANES=0" B_ENV="" A_FLAGS="" B_FLAGS="" TESTS="" TIMEOUT=240
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --context) CONTEXT=$2; shift ;;
    --batches) BATCHES=$2; shift ;;
    --configs) CONFIGS=$2; shift ;;
    --decode) DECODE=$2; shift ;;
    --a-env) A_ENV=$2; shift ;;
    --b-env) B_ENV=$2; shift ;;
    --a-flags) A_FLAGS=$2; shift ;;
    --b-flags) B_FLAGS=$2; shift ;;
    --tests) TESTS=$2; shift ;;
    --bench-timeout) TIMEOUT=$2; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
[[ -f $BUNDLE ]] || { echo "need --bundle"; exit 2; }
OUT=${OUT:-$ROOT/out/gpu-batch-ab}
source "$ROOT/tools/gpu/log.sh"
source "$ROOT/tools/gpu/binaries.sh"
if [[ -n $TESTS ]]; then
  step "CUDA tests: $TESTS"
  timeout 300 "$TESTBIN" --gtest_color=no --gtest_brief=1 --gtest_filter="$TESTS" 2>&1 | tail -8 ||
    fail "CUDA tests"
fi
: >"$OUT/batch_ab.jsonl"
RUN_NO=0
run() {  # side env-assignments config batch [flags]
  local side=$1 envs=$2 cfg=$3 batch=$4 flags=${5:-} policy budget args
  IFS=: read -r policy budget <<<"$cfg"
  args=(bench --synthetic llama-3.1-8b --device cuda --contexts "$CONTEXT" --decode "$DECODE"
        --repeats 1 --prefill-chunk 4096 --shared-prompt --batch "$batch" --kv-stats --json)
  if [[ $policy == full ]]; then
    args+=(--kv-offload off)
  else
    args+=(--kv-policy "$policy" --kv-budget "$budget")
    # shellcheck disable=SC2206
    args+=($flags)
  fi
  step "$side ($envs $flags): batch $batch, $cfg"
  # shellcheck disable=SC2086
  if ! env $envs timeout "$TIMEOUT" "$BIN" "${args[@]}" >"$OUT/tmp.json" 2>"$OUT/tmp.err"; then
    echo "failed: $(tail -1 "$OUT/tmp.err")"
    return
  fi
  grep -E "time per step|fetch " "$OUT/tmp.err" | head -2
  RUN_NO=$((RUN_NO + 1))
  cp "$OUT/tmp.err" "$OUT/run-$RUN_NO-$side-b$batch.err"  # keeps ICECACHE_TRACE_STEPS lines
  python3 -c 'import json,sys; print(json.dumps({"side": sys.argv[2], "env": sys.argv[3], "config": sys.argv[4], **json.load(open(sys.argv[1]))["results"][0]}))' \
    "$OUT/tmp.json" "$side" "$envs $flags" "$cfg" >>"$OUT/batch_ab.jsonl"
}
for batch in $BATCHES; do
  for cfg in $CONFIGS; do
    if [[ $cfg == full* ]]; then
      run full "" "$cfg" "$batch"
      continue
    fi
    run A "$A_ENV" "$cfg" "$batch" "$A_FLAGS"
    run B "$B_ENV" "$cfg" "$batch" "$B_FLAGS"
  done
done
rm -f "$OUT/tmp.json" "$OUT/tmp.err"
python3 - "$OUT/batch_ab.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| side | env | config | batch | decode ms/step | tokens/s (batch) | update ms/step |")
print("|:--|:--|:--|--:|--:|--:|--:|")
for r in rows:
    ms = r.get("decode_ms_per_step", 0)
    upd = r.get("kv", {}).get("update_seconds", 0) * 1e3
    print(f"| {r['side']} | {r['env'] or '-'} | {r['config']} | {r['batch']} | {ms:.2f} | "
          f"{r.get('decode_tokens_per_second_all', 0):.1f} | {upd:.2f} |")
EOF
step "done (status $STATUS)"
exit $STATUS

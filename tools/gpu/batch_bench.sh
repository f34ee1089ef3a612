#!/usr/bin/env bash
# Batched decode with the KV offloaded (issue 6, benchmarks 5b and 5c) on the Llama-3.1-8B shape
# (synthetic weights), one H200:
#   5b  128K context under --device-mem-limit (default 24G): full attention at batch 1 (expected
#       to fail: its 16 GiB of KV and 16 GB of weights do not fit), then icecache at batches
#       1, 2, ... until one fails; the largest that ran is the answer.
#   5c  32K context on the whole GPU: decode throughput (tokens/s summed over the batch) of full
#       attention (KV on the device) and of icecache (offloaded) at increasing batches, each up
#       to its first failure or the list's end; the best of each is compared.
# Every batch shares one prefilled prompt (--shared-prompt: forks of one sequence). Results go to
# $OUT (default out/gpu-batch): run.log and batch.jsonl (one JSON object per run, with "ok").
#
#   tools/gpu/batch_bench.sh [--bundle FILE] [--skip-5b] [--skip-5c] [--limit 24G]
#       [--budget 2048] [--decode N] [--b-batches "1 2 3 4"] [--full-batches "1 8 16 24 32"]
#       [--ice-batches "1 4 8 12"] [--bench-timeout SECONDS]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out/gpu-batch}
BUNDLE="" DO_B=1 DO_C=1 LIMIT_MEM=24G BUDGET=2048 DECODE=8 TIMEOUT=300
B_BATCHES="1 2 3 4" FULL_BATCHES="1 8 16 24 32" ICE_BATCHES="1 4 8 12"
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --skip-5b) DO_B=0 ;;
    --skip-5c) DO_C=0 ;;
    --limit) LIMIT_MEM=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --decode) DECODE=$2; shift ;;
    --b-batches) B_BATCHES=$2; shift ;;
    --full-batches) FULL_BATCHES=$2; shift ;;
    --ice-batches) ICE_BATCHES=$2; shift ;;
    --bench-timeout) TIMEOUT=$2; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
source "$ROOT/tools/gpu/log.sh"
step "environment"
nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv || true
free -g || true
step "binaries"
source "$ROOT/tools/gpu/binaries.sh"
SYN=(--synthetic llama-3.1-8b --device cuda --decode "$DECODE" --repeats 1 --prefill-chunk 4096
     --shared-prompt --kv-stats --json)

source "$ROOT/tools/gpu/bench_run.sh"
run() { bench_run "$OUT/batch.jsonl" "$1" "$2" "${SYN[@]}" "${@:3}"; }

if [[ $DO_B == 1 ]]; then
  run "5b full 128K --device-mem-limit $LIMIT_MEM" 1 --contexts 131072 --kv-offload off \
    --device-mem-limit "$LIMIT_MEM" && echo "note: full attention ran under $LIMIT_MEM"
  for b in $B_BATCHES; do
    run "5b icecache 128K --device-mem-limit $LIMIT_MEM" "$b" --contexts 131072 \
      --kv-policy icecache --kv-budget "$BUDGET" --device-mem-limit "$LIMIT_MEM" || break
  done
fi
if [[ $DO_C == 1 ]]; then
  for b in $FULL_BATCHES; do
    run "5c full 32K" "$b" --contexts 32768 --kv-offload off || break
  done
  for b in $ICE_BATCHES; do
    run "5c icecache 32K" "$b" --contexts 32768 --kv-policy icecache --kv-budget "$BUDGET" || break
  done
fi
rm -f "$OUT/tmp.json" "$OUT/tmp.err"
step "summary"
python3 - "$OUT/batch.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    tps = r.get("decode_tokens_per_second_all")
    print(f"{r['bench']:<45} batch {r['batch']:>3}  {'ok ' if r['ok'] else 'FAILED'}"
          + (f"  {r.get('decode_ms_per_step', 0):8.2f} ms/step  {tps:9.1f} tok/s" if r["ok"] else ""))
EOF
step "done (status $STATUS)"
exit $STATUS

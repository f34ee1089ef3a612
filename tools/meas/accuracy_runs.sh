#!/usr/bin/env bash
# The eval runs behind docs/ACCURACY.md (needle, fidelity, ruler, L-Eval) on the default model.
# Every run appends to its JSONL and skips samples already done, so rerunning this script after an
# interruption continues where it stopped.
#
#   tools/meas/accuracy_runs.sh ICECACHE_BINARY OUT_DIR [DATA_DIR]
# DATA_DIR defaults to ../shared/data (haystack/pg_essays, leval/*.jsonl).
set -u
bin=${1:?icecache binary}
out=${2:?output dir}
data=${3:-"$(cd "$(dirname "$0")/../.." && pwd)/../shared/data"}
policies=full,streaming,quest,oracle,lychee,icecache
budgets=64,128,256,1024
lengths=2K,4K,8K
mkdir -p "$out"
step() {  # name, args...
  local name=$1
  shift
  echo "== $name: $bin eval $*"
  local t0=$SECONDS
  "$bin" eval "$@" --progress never > "$out/$name.log" 2>&1
  echo "== $name: rc=$? ($((SECONDS - t0)) s)"
}
step needle needle -m default --haystack "$data/haystack/pg_essays" --lengths "$lengths" \
  --policies "$policies" --budgets "$budgets" --limit 4 --out "$out/needle"
step fidelity fidelity -m default --task "$data/leval/gov_report_summ.jsonl" --lengths "$lengths" \
  --policies "$policies" --budgets "$budgets" --limit 2 --steps 128 --gen-tokens 32 \
  --out "$out/fidelity"
step ruler ruler -m default --lengths 4K --policies "$policies" --budgets 256 --limit 1 \
  --out "$out/ruler"
step leval leval -m default --task "$data/leval/quality.jsonl" --lengths 4K \
  --policies "$policies" --budgets 256 --limit 8 --out "$out/leval"

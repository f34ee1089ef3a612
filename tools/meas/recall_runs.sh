#!/usr/bin/env bash
# Attention-mass recall of the KV policies at several budgets on one prompt file (docs/ACCURACY.md,
# "Attention-mass recall"). One `icecache generate --kv-recall --json` per (policy, budget); the
# JSON of each run is kept in OUT_DIR, and tools/meas/recall_table.py turns them into a table.
#
#   tools/meas/recall_runs.sh BUILD_DIR PROMPT_FILE OUT_DIR [POLICIES] [BUDGETS] [TOKENS]
# A policy written NAME:RANK (icecache:soft, lychee:centroid) runs with --kv-rank RANK.
set -u
build=${1:?build dir}
prompt=${2:?prompt file}
out=${3:?output dir}
policies=${4:-"streaming quest oracle lychee icecache"}
budgets=${5:-"256 64 128 1024"}
tokens=${6:-64}
mkdir -p "$out"
run() {  # name, extra args...
  local name=$1
  shift
  local cmd=("$build/icecache" generate -m default --prompt-file "$prompt" -n "$tokens" --temp 0
             --kv-stats --kv-recall --json --progress never "$@")
  echo "${cmd[*]}" > "$out/$name.cmd"
  local t0=$SECONDS
  if "${cmd[@]}" > "$out/$name.json" 2> "$out/$name.err"; then
    echo "$name: ok ($((SECONDS - t0)) s)"
  else
    echo "$name: failed: $(tail -1 "$out/$name.err")"
  fi
}
[ -e "$out/full.json" ] || run full --kv-policy full
for b in $budgets; do
  for spec in $policies; do  # a policy, or NAME:RANK (--kv-rank RANK)
    p=${spec%%:*} extra=()
    [[ $spec == *:* ]] && extra=(--kv-rank "${spec#*:}")
    name=${spec/:/-}
    [ -s "$out/${name}_$b.json" ] && continue
    run "${name}_$b" --kv-policy "$p" --kv-budget "$b" "${extra[@]}"
  done
done

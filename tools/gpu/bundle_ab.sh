#!/usr/bin/env bash
# A/B of two builds on the H200 in one run: the same `icecache bench` configurations (Llama-3.1-8B
# shape, synthetic weights, KV offloaded for sparse policies) with the binaries of bundle A and of
# bundle B (tools/gpu/make_bundle.sh), alternating A and B per configuration so that the
# machine's drift hits both alike. Prints each run's --kv-stats; results (one JSON line per run)
# go to $OUT/ab.jsonl.
#
#   tools/gpu/bundle_ab.sh --a OLD.tar.xz --b NEW.tar.xz [--contexts "131072"]
#       [--configs "lychee:centroid:256 icecache:auto:256"] [--decode 32] [--tests]
#       [--a-flags "..."] [--b-flags "..."]
# A configuration is POLICY:RANK:BUDGET; "full" alone runs full attention with all KV on the device.
# --tests runs bundle B's offload and device-selection CUDA tests first. --a-flags and --b-flags
# add options to one side's sparse runs, so that one bundle given as both A and B compares two
# settings (--a-flags "--kv-prefetch off").
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
A="" B="" CONTEXTS="131072" CONFIGS="lychee:centroid:256 icecache:auto:256" DECODE=32 TESTS=0
A_FLAGS="" B_FLAGS=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --a) A=$2; shift ;;
    --b) B=$2; shift ;;
    --contexts) CONTEXTS=$2; shift ;;
    --configs) CONFIGS=$2; shift ;;
    --decode) DECODE=$2; shift ;;
    --tests) TESTS=1 ;;
    --a-flags) A_FLAGS=$2; shift ;;
    --b-flags) B_FLAGS=$2; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
[[ -f $A && -f $B ]] || { echo "need --a and --b bundles"; exit 2; }
OUT=${OUT:-$ROOT/out/gpu-bundle-ab}
source "$ROOT/tools/gpu/log.sh"
source "$ROOT/tools/gpu/ab_bundles.sh"
declare -A BINS=([A]=${AB_DIR[A]}/bin/icecache [B]=${AB_DIR[B]}/bin/icecache)
if [[ $TESTS == 1 ]]; then
  step "bundle B: offload and device-selection CUDA tests"
  timeout 300 "${AB_DIR[B]}/bin/backend_cuda_tests" --gtest_color=no --gtest_brief=1 \
    --gtest_filter='CudaOffload*:CudaPageSelect*' 2>&1 | tail -5 || fail "CUDA tests"
fi
for ctx in $CONTEXTS; do
  for cfg in $CONFIGS; do
    IFS=: read -r policy rank budget <<<"$cfg"
    args=(bench --synthetic llama-3.1-8b --device cuda --contexts "$ctx" --decode "$DECODE"
          --repeats 1 --prefill-chunk 4096 --kv-stats --json)
    if [[ $policy == full ]]; then
      args+=(--kv-offload off)
    else
      args+=(--kv-policy "$policy" --kv-rank "$rank" --kv-budget "$budget")
    fi
    for side in A B; do
      flags=()
      if [[ $policy != full ]]; then
        [[ $side == A ]] && read -r -a flags <<<"$A_FLAGS"
        [[ $side == B ]] && read -r -a flags <<<"$B_FLAGS"
      fi
      step "$side: context $ctx, $cfg ${flags[*]}"
      timeout 300 "${BINS[$side]}" "${args[@]}" "${flags[@]}" >"$OUT/tmp.json" 2>"$OUT/tmp.err" ||
        { fail "$side $cfg $ctx: $(tail -1 "$OUT/tmp.err")"; continue; }
      grep -E "time per step|selection|prompt index|fetch|prefetch" "$OUT/tmp.err"
      python3 -c 'import json,sys; print(json.dumps({"side": sys.argv[2], "config": sys.argv[3], **json.load(open(sys.argv[1]))["results"][0]}))' \
        "$OUT/tmp.json" "$side" "$cfg" >>"$OUT/ab.jsonl"
    done
  done
done
rm -f "$OUT/tmp.json" "$OUT/tmp.err"
step "done (status $STATUS)"
exit $STATUS

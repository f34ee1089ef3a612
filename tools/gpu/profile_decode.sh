#!/usr/bin/env bash
# Per-kernel GPU time of decode steps on the Llama-3.1-8B shape (synthetic weights), measured
# with Nsight Compute (ncu, gpu__time_duration) on an H200: where a step's time goes, kernel by
# kernel, for full attention (KV on the device; CUDA graphs off so that ncu sees each launch)
# and for icecache selecting on the device (KV offloaded). The summary keeps one period of
# launches of the last decode steps (marked by the embedding kernel's launches). Results go to
# $OUT (default out/gpu-profile): <config>.csv (ncu's rows) and profile.md (per kernel: launches
# and microseconds in one decode step).
#
#   tools/gpu/profile_decode.sh [--bundle FILE] [--context 32768] [--budget 2048]
#                               [--configs "full icecache"] [--batch 1] [--kernels REGEX]
# --kernels REGEX profiles only the kernels whose names match (ncu's --kernel-name regex:...; the
# others run unprofiled, so a 128K prefill stays short); keep EmbedKernel in it, the summary
# finds the decode steps by its launches.
# --batch B decodes B sequences forked from one prompt (--shared-prompt) in each step; the
# summary then also counts the GEMV launches in its window, so that a window of two steps shows.
# Configurations: full, icecache, and full-unstacked (full with ICECACHE_CUDA_STACKED=0: q/k/v
# and gate/up as separate GEMVs, to compare with the stacked ones).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/out/gpu-profile}
BUNDLE="" CONTEXT=32768 BUDGET=2048 CONFIGS="full icecache" BATCH=1 KERNELS=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --bundle) BUNDLE=$2; shift ;;
    --context) CONTEXT=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    --configs) CONFIGS=$2; shift ;;
    --batch) BATCH=$2; shift ;;
    --kernels) KERNELS=$2; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
source "$ROOT/tools/gpu/log.sh"
mkdir -p "$OUT"
step "binaries"
source "$ROOT/tools/gpu/binaries.sh"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
[[ -n $NCU ]] || { fail "ncu not found"; exit 1; }

# Three decode steps; the summary takes the last.
BENCH=(bench --synthetic llama-3.1-8b --device cuda --contexts "$CONTEXT" --decode 3 --repeats 1
       --prefill-chunk 8192)
[[ $BATCH -gt 1 ]] && BENCH+=(--batch "$BATCH" --shared-prompt)
FILTER=()
[[ -n $KERNELS ]] && FILTER=(--kernel-name "regex:$KERNELS")
run() {  # name, extra bench flags...
  local name=$1 stacked=1
  shift
  [[ $name == *-unstacked ]] && stacked=0
  step "ncu: $name at context $CONTEXT"
  ICECACHE_CUDA_STACKED=$stacked ICECACHE_CUDA_GRAPHS=0 timeout 400 "$NCU" --csv --metrics gpu__time_duration.sum \
    --cache-control none --clock-control none "${FILTER[@]}" "$BIN" "${BENCH[@]}" "$@" \
    >"$OUT/$name.csv" 2>"$OUT/$name.err" || fail "ncu $name"
  tail -3 "$OUT/$name.err"
}
for config in $CONFIGS; do
  case $config in
    full|full-unstacked) run "$config" --kv-offload off ;;
    icecache) run icecache --kv-policy icecache --kv-budget "$BUDGET" ;;
    *) fail "unknown configuration $config" ;;
  esac
done

step "summary"
python3 - "$OUT" $CONFIGS <<'EOF' | tee "$OUT/profile.md"
import collections, csv, io, re, sys
out = sys.argv[1]
for name in sys.argv[2:]:
    text = open(f"{out}/{name}.csv").read()
    start = text.find('"ID"')
    if start < 0:
        print(f"{name}: no ncu rows"); continue
    rows = [r for r in csv.DictReader(io.StringIO(text[start:]))
            if r.get("Metric Name") == "gpu__time_duration.sum"]
    # "void ns::Kernel<2>(Params)" and "ns::<unnamed>::Kernel(Params)" -> "Kernel"
    names = [re.sub(r"<[^<>]*>$", "", r["Kernel Name"].split("(")[0]).split("::")[-1] for r in rows]
    # One decode step: a step launches the embedding kernel twice (the step's token, and a
    # short pass that starts the next step), so a whole period runs from the third-last
    # embedding launch to the last one.
    embeds = [i for i, n in enumerate(names) if "EmbedKernel" in n]
    if len(embeds) < 3:
        print(f"{name}: fewer than three embedding launches"); continue
    lo, hi = embeds[-3], embeds[-1]
    per = collections.OrderedDict()
    for r, n in zip(rows[lo:hi], names[lo:hi]):
        v = float(r["Metric Value"].replace(",", ""))
        unit = r["Metric Unit"]
        us = v / 1000.0 if unit in ("nsecond", "ns") else (v * 1000.0 if unit in ("msecond", "ms") else v)
        c, t = per.get(n, (0, 0.0))
        per[n] = (c + 1, t + us)
    total = sum(t for _, t in per.values())
    gemv = sum(c for n, (c, _) in per.items() if n.startswith("Gemv"))
    print(f"\n{name}: one decode step, {hi - lo} launches ({gemv} GEMV), {total:.0f} us of kernel time\n")
    print("| kernel | launches | us | share |\n|:--|--:|--:|--:|")
    for n, (c, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"| {n} | {c} | {t:.0f} | {100 * t / total:.1f}% |")
EOF
step "done (status $STATUS)"
exit $STATUS

#!/usr/bin/env python3
"""Merges the benchmark outputs of check_and_bench.sh into results.json and prints the table of
issue 5 item 7: IceCache vs PyTorch, prefill tokens/s and decode ms/step, with the bandwidth
floor (bytes a decode step must read: weights except the token embedding, plus the KV of every
sequence, over the measured device copy bandwidth)."""
import glob
import json
import os
import sys

# Llama-3.1-8B: bytes read per decode step apart from KV (bf16 matrices, f32 norms).
H, Q, KV, F, V, L = 4096, 4096, 1024, 14336, 128256, 32
WEIGHT_BYTES = L * 2 * (H * Q + 2 * H * KV + Q * H + 3 * H * F) + 2 * V * H + 4 * (2 * L + 1) * H
KV_BYTES_PER_TOKEN = L * KV * 2 * 2  # K and V, bf16


def main(raw_dir, out_dir):
    res = {"bandwidth_bytes_per_s": None, "ours": [], "torch": []}
    bw_file = os.path.join(raw_dir, "tmp_bandwidth.json")
    if os.path.exists(bw_file):
        for line in open(bw_file):
            if line.strip().startswith("{"):
                res["bandwidth_bytes_per_s"] = json.loads(line)["copy_bandwidth_bytes_per_s"]
    for f in sorted(glob.glob(os.path.join(raw_dir, "tmp_ours_*.json"))):
        text = open(f).read()
        start = text.find("{")
        if start < 0:
            continue
        j = json.loads(text[start:])
        for r in j["results"]:
            res["ours"].append(r)
    for f in sorted(glob.glob(os.path.join(raw_dir, "tmp_torch_*.jsonl"))):
        for line in open(f):
            if line.strip().startswith("{"):
                res["torch"].append(json.loads(line))
    with open(os.path.join(out_dir, "results.json"), "w") as fh:
        json.dump(res, fh, indent=1)

    bw = res["bandwidth_bytes_per_s"]
    lines = []
    if bw:
        lines.append(f"device copy bandwidth (read + write): {bw / 1e12:.2f} TB/s")
    lines.append(f"weights read per decode step: {WEIGHT_BYTES / 1e9:.2f} GB; KV: "
                 f"{KV_BYTES_PER_TOKEN // 1024} KiB per token")
    lines.append("")
    lines.append("IceCache decode: mean over all decode steps, and steady (the median of the second "
                 "half, PyTorch's method here)")
    lines.append("")
    lines.append("| context | batch | IceCache prefill tok/s | PyTorch prefill tok/s | ratio | "
                 "IceCache decode ms/step, mean | steady | PyTorch decode ms/step | "
                 "floor ms | mean / floor | steady / floor |")
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    keys = sorted({(r["context"], r.get("batch", 1)) for r in res["ours"] + res["torch"]},
                  key=lambda k: (k[1], k[0]))
    for ctx, b in keys:
        o = next((r for r in res["ours"] if r["context"] == ctx and r.get("batch", 1) == b), {})
        t = [r for r in res["torch"] if r["context"] == ctx and r.get("batch", 1) == b]
        t_eager = next((r for r in t if not r.get("compiled") and "error" not in r), None)
        t_comp = next((r for r in t if r.get("compiled") and "error" not in r), None)
        t_err = next((r["error"][:40] for r in t if "error" in r), None)
        op = o.get("prefill_tokens_per_second")
        od = o.get("decode_ms_per_step")
        osd = o.get("decode_ms_per_step_steady")
        tp = (t_eager or t_comp or {}).get("prefill_tokens_per_second")
        td_e = t_eager and t_eager.get("decode_ms_per_step")
        td_c = t_comp and t_comp.get("decode_ms_per_step")
        floor = (WEIGHT_BYTES + b * ctx * KV_BYTES_PER_TOKEN) / bw * 1e3 if bw else None
        fmt = lambda v, f="{:.1f}": "-" if v is None else f.format(v)
        td = " / ".join(x for x in [fmt(td_e, "{:.2f}") + " eager" if td_e else None,
                                     fmt(td_c, "{:.2f}") + " compiled" if td_c else None] if x)
        if not td:
            td = t_err or "-"
        prefill_b = "(shared)" if b > 1 else ""
        lines.append(
            f"| {ctx} | {b} | {fmt(op)}{prefill_b} | {fmt(tp)} | "
            f"{fmt(op / tp if op and tp else None, '{:.2f}')} | {fmt(od, '{:.2f}')} | "
            f"{fmt(osd, '{:.2f}')} | {td} | {fmt(floor, '{:.2f}')} | "
            f"{fmt(od / floor if od and floor else None, '{:.2f}')} | "
            f"{fmt(osd / floor if osd and floor else None, '{:.2f}')} |")
    text = "\n".join(lines)
    with open(os.path.join(out_dir, "summary.md"), "w") as fh:
        fh.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else sys.argv[1])

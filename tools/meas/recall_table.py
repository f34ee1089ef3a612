"""Markdown tables from the runs of tools/meas/recall_runs.sh (one JSON per policy and budget).

  python3 tools/meas/recall_table.py /tmp/recall

Prints, per policy and budget, the attention-mass recall (mean, 10th percentile, minimum over
(decode step, layer, query head) samples), the tokens attended per (layer, KV head) and how many
of the greedy tokens equal those of the full-attention run (same prompt, same length).
"""

from __future__ import annotations

import glob
import json
import os
import sys


def main() -> int:
    d = sys.argv[1]
    runs = {}
    for path in glob.glob(os.path.join(d, "*.json")):
        name = os.path.basename(path)[:-5]
        try:
            with open(path) as f:
                runs[name] = json.load(f)
        except (json.JSONDecodeError, OSError):
            continue
    full = runs.get("full")
    known = ["streaming", "quest", "oracle", "lychee", "icecache"]
    # Runs are named POLICY_BUDGET (or icecache-RANK_BUDGET for icecache:RANK runs).
    names = sorted({n.rsplit("_", 1)[0] for n in runs if "_" in n})
    policies = [p for p in known if p in names] + [n for n in names if n not in known]
    budgets = sorted({int(n.rsplit("_", 1)[1]) for n in runs if "_" in n})
    print("| policy | budget | recall mean | p10 | min | tokens attended | context | "
          "greedy tokens equal to full's |")
    print("|:--|--:|--:|--:|--:|--:|--:|--:|")
    if full:
        kv = full["stats"]["kv"]
        print(f"| full | - | {kv['recall_mean']:.4f} | {kv['recall_p10']:.3f} | "
              f"{kv['recall_min']:.4f} | {kv['tokens_attended_dense']:.0f} | "
              f"{kv['context_tokens']:.0f} | - |")
    for p in policies:
        for b in budgets:
            r = runs.get(f"{p}_{b}")
            if r is None:
                err = os.path.join(d, f"{p}_{b}.err")
                if os.path.exists(err):
                    msg = open(err).read().strip().splitlines()
                    print(f"| {p} | {b} | failed: {msg[-1] if msg else '?'} | | | | | |")
                continue
            kv = r["stats"]["kv"]
            same = "-"
            if full:
                a, t = full["tokens"], r["tokens"]
                prefix = next((i for i, (x, y) in enumerate(zip(a, t)) if x != y), min(len(a), len(t)))
                same = f"first {prefix} of {len(a)}" if prefix < len(a) else f"all {len(a)}"
            print(f"| {p} | {b} | {kv['recall_mean']:.4f} | {kv['recall_p10']:.3f} | "
                  f"{kv['recall_min']:.4f} | {kv['tokens_attended']:.1f} | "
                  f"{kv['context_tokens']:.0f} | {same} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

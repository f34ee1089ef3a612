"""Writes real long text from L-Eval JSONL files (read in place) to a file, cut to a token count.

The `input` fields of the chosen file's lines, longest first (or the line given by --line), are
joined with blank lines until the text holds at least --tokens SmolLM2 tokens, and then cut at the
end of token number --tokens (the tokenizer is the faithful one of tools/reference/smollm2.py, which
matches the engine's). Used by the measurements in docs/PERF.md and docs/ACCURACY.md: the data stays
in ../shared/data; the output goes to a scratch path such as /tmp.

  python3 tools/meas/leval_text.py ../shared/data/leval/gov_report_summ.jsonl --tokens 8000 \
      --out /tmp/gov_8k.txt
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
NEEDS = "this tool needs: pip install gguf tokenizers transformers (docs/dev/REFERENCE.md)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("jsonl", help="an L-Eval file ({input, instructions, outputs} per line)")
    ap.add_argument("--tokens", type=int, required=True, help="tokens of text to write")
    ap.add_argument("--line", type=int, default=-1, help="only this line's document (0-based)")
    ap.add_argument("--out", required=True, help="output text file (outside the repository)")
    ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "..", ".cache",
                                                    "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    a = ap.parse_args()

    with open(a.jsonl, encoding="utf-8") as f:
        docs = [json.loads(line)["input"] for line in f if line.strip()]
    if a.line >= 0:
        docs = [docs[a.line]]
    else:
        docs.sort(key=len, reverse=True)
    if not os.path.exists(a.model):
        print(f"error: {a.model}: no such model (scripts/fetch_model.sh gets it)", file=sys.stderr)
        return 1
    try:  # the reference tokenizer's packages are imported here, so one message covers them all
        from smollm2 import faithful_tokenizer

        tok, _ = faithful_tokenizer(a.model)
    except ImportError as e:
        print(f"error: {e}; {NEEDS}", file=sys.stderr)
        return 1
    text = ""
    used = 0
    for d in docs:
        text = d if not text else text + "\n\n" + d
        used += 1
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        if len(enc["input_ids"]) >= a.tokens:
            end = enc["offset_mapping"][a.tokens - 1][1]
            text = text[:end]
            break
    else:
        print(f"error: only {len(enc['input_ids'])} tokens in {a.jsonl}", file=sys.stderr)
        return 1
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(text)
    n = len(tok(text, add_special_tokens=False)["input_ids"])
    print(f"{a.out}: {n} tokens, {len(text)} characters, from {used} document(s) of {a.jsonl}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
